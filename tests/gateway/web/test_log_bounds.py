"""What a request can make the gateway log is bounded (issue 27 §6: a 13 KB request once wrote a
~100 KB traceback).

The process log's handler (`gateway.logs.log_handler`, what `configure_logging` installs) cuts a
message to `MAX_MESSAGE_CHARS` and a traceback to `MAX_TRACEBACK_CHARS`, keeping its first and
last frames, after scrubbing and with the structured fields whole. A client's error (4xx) is
logged without a traceback; a real 500 keeps its traceback, bounded.
"""

from __future__ import annotations

import contextvars
import io
import logging
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
from aiohttp import web

from cedarberg.gateway.logs import (
    MAX_MESSAGE_CHARS,
    MAX_TRACEBACK_CHARS,
    bind_principal,
    bind_request,
    log_handler,
)
from cedarberg.gateway.web.answers import REQUEST_ID_HEADER
from cedarberg.gateway.web.route import Route
from tests.gateway.web.conftest import InProcessGateway, MakeGateway
from tests.support.iceberg_types import nested_type, schema_of

# A JSON line holds the bounded message or traceback plus its fields and the cut markers.
LINE_OVERHEAD = 512


@pytest.fixture
def process_log() -> Iterator[io.StringIO]:
    """The process log's handler, writing JSON lines to a buffer, on the root logger (as in a
    server) for the duration of the test."""
    stream = io.StringIO()
    handler = log_handler(stream, "json")
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        yield stream
    finally:
        root.removeHandler(handler)
        root.setLevel(level)


def lines(stream: io.StringIO) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in stream.getvalue().splitlines()]


def ping(depth: int) -> None:
    """Recurse through two alternating frames, as pyiceberg's type parsing does, so that the
    traceback cannot be folded into "[Previous line repeated N more times]"."""
    pong(depth + 1)


def pong(depth: int) -> None:
    ping(depth + 1)


def test_a_long_message_is_cut_and_its_fields_kept(process_log: io.StringIO) -> None:
    def in_a_request() -> None:
        # In a context of its own, as aiohttp gives each request: the ids end with it instead of
        # staying bound for the tests that run after this one.
        bind_request("rid-bounded-0001")
        bind_principal("service:client")
        logging.getLogger("cedarberg.request").warning("refused: %s", "x" * 100_000)

    contextvars.copy_context().run(in_a_request)
    [line] = lines(process_log)
    assert len(line["message"]) <= MAX_MESSAGE_CHARS + 40
    assert line["message"].startswith("refused: xxx")
    assert line["message"].endswith("characters cut]")
    assert (line["level"], line["logger"]) == ("WARNING", "cedarberg.request")
    assert (line["request_id"], line["principal"]) == ("rid-bounded-0001", "service:client")
    assert len(process_log.getvalue()) <= MAX_MESSAGE_CHARS + LINE_OVERHEAD


def test_a_deep_traceback_keeps_both_ends_within_the_bound(process_log: io.StringIO) -> None:
    try:
        ping(0)
    except RecursionError:
        logging.getLogger("cedarberg.request").exception("unhandled error")
    [line] = lines(process_log)
    trace = line["exception"]
    assert len(trace) <= MAX_TRACEBACK_CHARS + 80
    assert trace.startswith("Traceback (most recent call last):")
    assert "test_a_deep_traceback_keeps_both_ends_within_the_bound" in trace  # the entry frame
    assert "characters cut" in trace
    assert trace.rstrip().endswith("RecursionError: maximum recursion depth exceeded")


def test_a_secret_at_the_cut_is_scrubbed_whole_before_the_cut(process_log: io.StringIO) -> None:
    """Scrubbing runs on the whole message, then the cut: a random-looking secret across the cut
    is recognised whole (cut first, its first half would be too short to look random)."""
    secret = "Q7vX2pLk9ZtR4mWc8NbY3hJd6FsG1aEu5KoT0iVy"
    message = "y" * (MAX_MESSAGE_CHARS - 20) + f" {secret} " + "z" * 5000
    logging.getLogger("cedarberg.authn").warning("%s", message)
    [line] = lines(process_log)
    assert secret[:12] not in line["message"]
    assert "[REDACTED]" in line["message"]


def test_the_text_format_is_bounded_too() -> None:
    stream = io.StringIO()
    handler = log_handler(stream, "text")
    record = logging.LogRecord("cedarberg.request", logging.WARNING, __file__, 1, "%s", ("q" * 50_000,), None)
    handler.handle(record)
    assert len(stream.getvalue()) <= MAX_MESSAGE_CHARS + LINE_OVERHEAD


async def _recurse(_request: web.Request) -> web.StreamResponse:
    ping(0)
    raise AssertionError("unreachable: ping recurses until the stack is exhausted")


async def test_a_real_500_logs_its_traceback_bounded(
    make_gateway: MakeGateway, process_log: io.StringIO
) -> None:
    route = Route("GET", "/v1/namespaces/{namespace}/recurse", _recurse, "loadNamespaceMetadata")
    gw = await make_gateway(extra_routes=[route])
    await gw.create_namespace("ns")
    answer = await gw.client.get("/v1/namespaces/ns/recurse")
    assert answer.status == 500
    request_id = answer.headers[REQUEST_ID_HEADER]
    [line] = [line for line in lines(process_log) if line.get("exception")]
    assert line["request_id"] == request_id
    assert "RecursionError" in line["exception"]
    assert len(line["exception"]) <= MAX_TRACEBACK_CHARS + 80
    for logged in lines(process_log):
        assert len(logged["message"]) <= MAX_MESSAGE_CHARS + 40
        assert len(logged.get("exception", "")) <= MAX_TRACEBACK_CHARS + 80


async def test_a_client_error_logs_no_traceback(gw: InProcessGateway, process_log: io.StringIO) -> None:
    """A body nested 150 structs deep, and one whose type pyiceberg refuses: 400s, and nothing
    the request made the gateway log carries a traceback or exceeds the line bound."""
    await gw.create_namespace("ns")
    for schema in (schema_of(nested_type("struct", 150)), schema_of("decimal(99,2)")):
        answer = await gw.client.post("/v1/namespaces/ns/tables", json={"name": "t", "schema": schema})
        assert answer.status == 400
        assert (await answer.json())["error"]["type"] == "BadRequestException"
    logged = lines(process_log)
    assert all("exception" not in line for line in logged)
    assert all(len(line["message"]) <= MAX_MESSAGE_CHARS + 40 for line in logged)
