"""Process logging: JSON lines (default) or text, each line carrying the request id and the
principal of the request it was written for.

    configure_logging("INFO", "json")          # once, at start-up (cedarberg serve and workers)
    bind_request(request_id)                   # by the outermost middleware, per request
    bind_principal("service:etl")              # after authentication

aiohttp runs every request in its own task, and a task runs in its own copy of the context, so
the context variables below hold the current request's values in every log call made while
serving it, whichever module makes the call. Outside a request both are null.

Both formats print every structured field a log call attaches (`extra={...}`, see
`gateway.log_fields`): JSON lines as keys of the line's object (a field named like one of the
line's own keys is printed as `extra_NAME`), text lines as ` key=value` pairs after the message.
The JSON keys `time`, `request_id` and `principal` are the audit log's names for the same facts.

Every handler gets `SecretScrubbingFilter`: whatever a log call is handed, message or field,
secrets never reach the log (the filter also renders and scrubs tracebacks before the formatter
sees them). Then `BoundedRecordFilter`: a line is bounded whatever a client sent, its message to
`MAX_MESSAGE_CHARS` and its traceback to `MAX_TRACEBACK_CHARS` (the first and the last frames
kept); the formatters bound the attached fields (`log_fields.bounded`), while the line's own
fields (time, level, logger, request id, principal) are always whole. A client's error (4xx) is
answered without a traceback (`gateway.web.errors`).
"""

from __future__ import annotations

import contextvars
import datetime as dt
import logging
import sys
from typing import Literal, TextIO

import orjson

from cedarberg.gateway.audit import SecretScrubbingFilter
from cedarberg.gateway.log_fields import as_text, bounded, extra_fields

_REQUEST_ID: contextvars.ContextVar[str | None] = contextvars.ContextVar("request_id", default=None)
_PRINCIPAL: contextvars.ContextVar[str | None] = contextvars.ContextVar("principal", default=None)


def bind_request(request_id: str) -> None:
    _REQUEST_ID.set(request_id)
    _PRINCIPAL.set(None)


def bind_principal(principal: str) -> None:
    _PRINCIPAL.set(principal)


def current_request_id() -> str | None:
    """The id of the request being handled (for records made below the HTTP layer)."""
    return _REQUEST_ID.get()


# The keys of a JSON line itself: an attached field of the same name is printed as extra_NAME.
_LINE_KEYS = frozenset({"time", "level", "logger", "message", "request_id", "principal", "exception"})


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, request_id, principal, then the
    attached fields[, exception]."""

    def format(self, record: logging.LogRecord) -> str:
        document: dict[str, object] = {
            "time": dt.datetime.fromtimestamp(record.created, dt.UTC).isoformat(timespec="milliseconds")[:-6]
            + "Z",
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
            "request_id": _REQUEST_ID.get(),
            "principal": _PRINCIPAL.get(),
        }
        fields = extra_fields(record)
        if fields:
            for name, value in bounded(fields).items():
                document[f"extra_{name}" if name in _LINE_KEYS else name] = value
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            document["exception"] = record.exc_text
        return orjson.dumps(document).decode()


class TextFormatter(logging.Formatter):
    """`TIME LEVEL LOGGER MESSAGE key=value ... [rid=.. principal=..]`, then the traceback on the
    lines below."""

    def format(self, record: logging.LogRecord) -> str:
        record.message = record.getMessage()
        if self.usesTime():
            record.asctime = self.formatTime(record, self.datefmt)
        line = self.formatMessage(record)
        fields = extra_fields(record)
        if fields:
            line += as_text(bounded(fields))
        request_id = _REQUEST_ID.get()
        if request_id is not None:
            line += f" [rid={request_id} principal={_PRINCIPAL.get() or '-'}]"
        if record.exc_info and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            line += "\n" + record.exc_text
        if record.stack_info:
            line += "\n" + self.formatStack(record.stack_info)
        return line


# A 13 KB body nested 150 deep once made a 100 KB traceback: lines are bounded so that a client
# cannot fill the log (or hide other lines in it) with what it sends.
MAX_MESSAGE_CHARS = 2048
MAX_TRACEBACK_CHARS = 16384
_TRACEBACK_HEAD_CHARS = 4096  # the entry frames; the rest of the budget keeps the innermost ones


def _cut(text: str, limit: int, head: int) -> str:
    """`text`, or its first `head` and last characters with a marker between, `limit` in all."""
    if len(text) <= limit:
        return text
    tail = limit - head
    return f"{text[:head]}\n...[{len(text) - limit} characters cut]...\n{text[-tail:]}"


class BoundedRecordFilter(logging.Filter):
    """Bounds a record's message and traceback (install after `SecretScrubbingFilter`, so that
    what is cut was scrubbed whole and no secret is left half-recognisable)."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if len(message) > MAX_MESSAGE_CHARS:
            record.msg = (
                f"{message[:MAX_MESSAGE_CHARS]}...[{len(message) - MAX_MESSAGE_CHARS} characters cut]"
            )
            record.args = None
        if record.exc_info and record.exc_info[1] is not None and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = _cut(record.exc_text, MAX_TRACEBACK_CHARS, _TRACEBACK_HEAD_CHARS)
            record.exc_info = None
        if record.stack_info:
            record.stack_info = _cut(record.stack_info, MAX_TRACEBACK_CHARS, _TRACEBACK_HEAD_CHARS)
        return True


def log_handler(stream: TextIO, fmt: Literal["json", "text"]) -> logging.Handler:
    """The handler of the process log: lines in `fmt` to `stream`, scrubbed, then bounded."""
    handler = logging.StreamHandler(stream)
    handler.setFormatter(
        JsonFormatter() if fmt == "json" else TextFormatter("%(asctime)s %(levelname)s %(name)s %(message)s")
    )
    handler.addFilter(SecretScrubbingFilter())
    handler.addFilter(BoundedRecordFilter())
    return handler


def configure_logging(level: str, fmt: Literal["json", "text"]) -> None:
    """Send every logger's records to stderr in `fmt`, scrubbed and bounded, at `level` and above."""
    handler = log_handler(sys.stderr, fmt)
    root = logging.getLogger()
    for old in list(root.handlers):
        root.removeHandler(old)
    root.addHandler(handler)
    root.setLevel(level)
    # Alembic's migration chatter ("Context impl ...") is noise at INFO in a server's log.
    logging.getLogger("alembic").setLevel(max(logging.WARNING, root.level))
