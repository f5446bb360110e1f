"""The structured fields of a log record: what a log call attaches with `extra={...}`.

    log.error("policy set refused", extra={"policy_dir": "/etc/policies",
                                           "problems": ["grants.cedar:12: unexpected token"]})

`extra_fields(record)` is every attribute a record carries beyond the standard `LogRecord` ones
(which the formatters print in their own way), in the order the call attached them. Both log
formats print them (`gateway.logs`): JSON as keys of the line's object, text as ` key=value`
pairs (`as_text`). `SecretScrubbingFilter` scrubs them like the message, and `bounded` makes
them JSON-safe and bounds them, so that a field holding what a client sent can neither leak a
secret nor fill the log:

- a string keeps `MAX_FIELD_CHARS` characters, a list or mapping its first `MAX_FIELD_ITEMS`
  items, nesting stops at `MAX_FIELD_DEPTH`; each cut is marked;
- all fields of one record together take at most `MAX_FIELDS_CHARS` characters of JSON: a list
  that does not fit keeps the items that do, a string its head, any other field is replaced by a
  marker (once the budget is spent, each further field is a marker of a few characters);
- objects that are not JSON types become their `str`; integers beyond 64 bits become strings.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from typing import Any, Final

import orjson

MAX_FIELD_CHARS: Final = 2048
MAX_FIELD_ITEMS: Final = 50
MAX_FIELD_DEPTH: Final = 4
MAX_FIELDS_CHARS: Final = 8192

# Every attribute `logging` itself puts on a record (3.12 adds taskName), and the two a formatter
# adds while formatting (message, asctime).
_STANDARD: Final = frozenset(vars(logging.LogRecord("", logging.INFO, "", 0, "", None, None))) | {
    "message",
    "asctime",
    "taskName",
}
_INT_RANGE: Final = range(-(2**63), 2**64)
# A text value printed as is: no whitespace, quote, '=' or backslash (else it is JSON-quoted).
_BARE: Final = re.compile(r'[^\s"=\\]+')


def extra_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The fields a log call attached to `record` (its `extra=`), by name."""
    return {
        name: value
        for name, value in record.__dict__.items()
        if name not in _STANDARD and not name.startswith("_")
    }


def _cut_marker(count: int, what: str) -> str:
    return f"...[{count} {what} cut]"


def _json_safe(value: Any, depth: int) -> Any:
    """`value` as JSON types, each string, list and mapping cut to its bound."""
    if isinstance(value, str):
        if len(value) > MAX_FIELD_CHARS:
            return value[:MAX_FIELD_CHARS] + _cut_marker(len(value) - MAX_FIELD_CHARS, "characters")
        return value
    if value is None or isinstance(value, bool | float):
        return value
    if isinstance(value, int):
        return value if value in _INT_RANGE else str(value)
    if depth >= MAX_FIELD_DEPTH:
        return "[nested too deep]"
    if isinstance(value, Mapping):
        items = list(value.items())
        out = {str(key): _json_safe(item, depth + 1) for key, item in items[:MAX_FIELD_ITEMS]}
        if len(items) > MAX_FIELD_ITEMS:
            out["..."] = _cut_marker(len(items) - MAX_FIELD_ITEMS, "entries")
        return out
    if isinstance(value, list | tuple | set | frozenset):
        listed = list(value)
        kept: list[Any] = [_json_safe(item, depth + 1) for item in listed[:MAX_FIELD_ITEMS]]
        if len(listed) > MAX_FIELD_ITEMS:
            kept.append(_cut_marker(len(listed) - MAX_FIELD_ITEMS, "items"))
        return kept
    return _json_safe(str(value), depth)


def _size(value: Any) -> int:
    return len(orjson.dumps(value))


def _fit(value: Any, size: int, budget: int) -> Any:
    """`value` (JSON-safe, `size` characters of JSON) cut to about `budget` characters: a list
    keeps the items that fit, a string its head, anything else becomes a marker."""
    marker = _cut_marker(size, "characters")
    room = budget - len(marker) - 8  # quotes, comma, brackets
    if isinstance(value, list):
        kept: list[Any] = []
        for item in value:
            room -= _size(item) + 1
            if room < 0:
                break
            kept.append(item)
        return [*kept, _cut_marker(len(value) - len(kept), "items")]
    if isinstance(value, str) and room > 0:
        return value[:room] + _cut_marker(len(value) - room, "characters")
    return marker


def bounded(fields: Mapping[str, Any]) -> dict[str, Any]:
    """`fields` made JSON-safe and bounded (see the module docstring), in the same order."""
    out: dict[str, Any] = {}
    budget = MAX_FIELDS_CHARS
    for name, value in fields.items():
        safe = _json_safe(value, 0)
        size = _size(safe) + len(name) + 4
        if size > budget:
            safe = _fit(safe, size, budget - len(name) - 4)
            size = _size(safe) + len(name) + 4
        budget = max(budget - size, 0)
        out[name] = safe
    return out


def _text_value(value: Any) -> str:
    if isinstance(value, str) and value.isprintable() and _BARE.fullmatch(value):
        return value
    return orjson.dumps(value).decode()


def as_text(fields: Mapping[str, Any]) -> str:
    """` key=value` for each field (JSON-safe values, as `bounded` returns them): a plain word as
    is, any other string JSON-quoted (so a value never breaks the line or forges a pair), lists,
    mappings, numbers, booleans and null in JSON."""
    return "".join(f" {name}={_text_value(value)}" for name, value in fields.items())
