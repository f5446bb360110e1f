"""The messages between the SQLite registry's writer process (catalog.store.sqlite_writer) and the
workers that hand it their write transactions (catalog.store.sqlite_handoff), over a Unix socket.

A frame is a 4-byte big-endian length and a JSON array. Statement arguments and result values
are SQLite's types (None, int, float, str, bytes); bytes travel as `{"b": base64}`, which no
other value can be (SQLite binds no mappings). A frame longer than MAX_FRAME is refused.

One session (connection) runs one write transaction at a time:

    worker -> writer                      writer -> worker
    ["begin"]                             ["ok"] | error
    ["exec", sql, [args]]                 ["rows", [rows] | null, rowcount] | error
    ["many", sql, [[args], ...]]          ["ok"] | error
    ["commit"]                            ["ok"] (durable) | ["unknown"] | error
    ["rollback"]                          ["ok"]

or, for a whole transaction in one message (catalog.store.writer_calls):

    ["call", procedure, {arguments}]      ["outcome", n] (n = 0: committed, durable) | ["unknown"] | error

where error is ["integrity", foreign_key, detail] or ["database", exception class name].
"""

from __future__ import annotations

import asyncio
import base64
import struct
from collections.abc import Mapping, Sequence
from typing import Any

import orjson

MAX_FRAME = 256 * 1024 * 1024  # far above any registry row; a length beyond it is corruption
_LENGTH = struct.Struct(">I")


class WireError(Exception):
    """The peer closed the session or sent a frame that is not a message."""


def _out(value: Any) -> Any:
    if isinstance(value, bytes | bytearray | memoryview):
        return {"b": base64.b64encode(value).decode("ascii")}
    return value


def _in(value: Any) -> Any:
    return base64.b64decode(value["b"], validate=True) if isinstance(value, dict) else value


def pack_values(values: Sequence[Any]) -> list[Any]:
    """Statement arguments or one result row, ready for the JSON of a frame."""
    return [_out(value) for value in values]


def unpack_values(values: Sequence[Any]) -> tuple[Any, ...]:
    """What `pack_values` packed."""
    return tuple(_in(value) for value in values)


def pack_mapping(values: Mapping[str, Any]) -> dict[str, Any]:
    """A call's arguments (values as `pack_values` packs them; a list travels as it is)."""
    return {name: _out(value) for name, value in values.items()}


def unpack_mapping(values: Mapping[str, Any]) -> dict[str, Any]:
    """What `pack_mapping` packed."""
    return {name: _in(value) for name, value in values.items()}


def frame(message: Sequence[Any]) -> bytes:
    payload = orjson.dumps(message)
    return _LENGTH.pack(len(payload)) + payload


async def read_message(reader: asyncio.StreamReader) -> list[Any] | None:
    """The next message; None if the peer closed the session between messages. Raises
    WireError for a session closed mid-frame or a frame that is not a JSON array."""
    try:
        head = await reader.readexactly(_LENGTH.size)
    except asyncio.IncompleteReadError as err:
        if not err.partial:
            return None
        raise WireError("session closed mid-frame") from None
    (length,) = _LENGTH.unpack(head)
    if length > MAX_FRAME:
        raise WireError("frame too long")
    try:
        message = orjson.loads(await reader.readexactly(length))
    except asyncio.IncompleteReadError:
        raise WireError("session closed mid-frame") from None
    except orjson.JSONDecodeError:
        raise WireError("frame is not JSON") from None
    if not isinstance(message, list) or not message or not isinstance(message[0], str):
        raise WireError("frame is not a message")
    return message
