"""The audit log: one JSON line per authorization decision and per mutation.

Public API::

    audit = AuditLog.open(AuditSettings(destination="stdout" | "/var/log/cedarberg/audit.jsonl"))
    audit.record(AuditEvent(EventKind.DECISION, request_id=..., principal=..., action=...,
                            resource=..., decision="allow", policy_ids=[...], policy_version=...))
    audit.record(AuditEvent(EventKind.MUTATION, request_id=..., principal=..., action=...,
                            resource=..., outcome="success"))
    audit.flush()  /  await audit.aflush()      # wait until everything recorded so far is written
    audit.reopen()                              # after log rotation (e.g. on SIGHUP)
    audit.close()
    scrub(value) -> value                       # the scrubber, also for other logs:
    SecretScrubbingFilter()                     # a logging.Filter that scrubs every record

Every line has the same keys, in this order (``null`` where a key does not apply): ``time``
(ISO-8601 UTC, milliseconds, ``Z``), ``event`` (``decision`` | ``mutation``), ``request_id``,
``principal``, ``principal_kind``, ``auth_method``, ``client_address``, ``action``, ``resource``,
``decision`` (``allow`` | ``deny``), ``policy_ids`` (determining policies), ``policy_version``,
``outcome`` (mutations: ``success`` | ``failure`` | ``unknown``), ``status`` (HTTP status), ``detail``.

Invariants:

- **Recording never blocks the event loop on I/O.** `record` scrubs and serialises (orjson, a few
  µs) and appends the line to a deque the writer thread drains (an append is atomic under the
  interpreter lock: no lock, no condition and no wake-up per record; the writer is woken only when
  it had gone idle); the thread writes whatever has queued up in one ``write`` and flushes after
  each batch. Records are never dropped: if the writer falls ``queue_size`` lines behind,
  recording waits for it (back-pressure) rather than losing audit records. A write error is
  logged (``cedarberg.audit``) and makes `healthy` false.
- **No secret reaches the log**, even when passed by mistake: every string is scrubbed before it
  is serialised (see `scrub`): bearer/basic credentials, ``cbk_`` API keys, JWT/JWE-looking
  strings, PEM private keys, ``secret=...``/``"token": "..."`` pairs and values of mapping keys
  that name secrets are replaced by ``[REDACTED]``. Free-form fields (``request_id``,
  ``client_address``, ``detail``) are further scrubbed of long random-looking strings (32+
  characters of base64 alphabet mixing upper case, lower case and digits); the structured fields
  (principal, action, resource, policies) are not, so long table names stay readable. Record API
  key ids without the ``cbk_`` prefix: anything after ``cbk_`` is treated as a key. Strings are
  cut to 2,048 characters, and JSON escaping keeps every record on one line.
- The file is opened for append with mode 0600 (created with its parent directories).
"""

from __future__ import annotations

import asyncio
import collections
import functools
import logging
import os
import re
import sys
import threading
import time
from collections.abc import Iterable, Mapping
from dataclasses import KW_ONLY, dataclass
from enum import StrEnum
from pathlib import Path
from typing import IO, Any, Final

import orjson

from cedarberg.gateway.authn.principal import Principal
from cedarberg.gateway.config.audit import AuditSettings

__all__ = [
    "AuditEvent",
    "AuditLog",
    "Ruling",
    "EventKind",
    "Outcome",
    "SecretScrubbingFilter",
    "scrub",
]

log = logging.getLogger("cedarberg.audit")

REDACTED: Final = "[REDACTED]"
MAX_STRING: Final = 2048
_MAX_DEPTH: Final = 8


class Ruling(StrEnum):
    """What a decision ruled, as recorded (the decision itself is `gateway.authz.engine.Decision`)."""

    ALLOW = "allow"
    DENY = "deny"


class Outcome(StrEnum):
    SUCCESS = "success"
    FAILURE = "failure"
    UNKNOWN = "unknown"  # e.g. a commit whose result could not be confirmed


class EventKind(StrEnum):
    DECISION = "decision"  # an authorization decision (or a refusal audited as a denial)
    MUTATION = "mutation"  # a change (create, commit, drop, key issued, credentials vended...)


@dataclass(frozen=True, slots=True)
class AuditEvent:
    """One audit record, before it is scrubbed and written (`AuditLog.record`).

    A decision carries its `decision`, determining `policy_ids` and `policy_version`; a mutation
    carries how it ended (`outcome`, HTTP `status`) and is `allow` unless said otherwise. `detail`
    is free-form (e.g. evaluation errors, a refusal's reason) and scrubbed like every string.
    """

    kind: EventKind
    _: KW_ONLY
    request_id: str | None
    principal: Principal | None
    action: str
    resource: str
    decision: Ruling | str = Ruling.ALLOW
    policy_ids: Iterable[str] = ()
    policy_version: str | None = None
    outcome: Outcome | str | None = None
    status: int | None = None
    client_address: str | None = None
    detail: Mapping[str, Any] | str | None = None


# Placeholders of a template's open fields: no scrubbing rule touches them, and orjson writes them
# as they are, so the rendered line splits on them exactly.
_TIME_SLOT = "\u2063time\u2063"
_REQUEST_ID_SLOT = "\u2063request-id\u2063"


@dataclass(frozen=True, slots=True)
class AuditTemplate:
    """An audit line rendered once: `head` + time + `middle` + request id + `tail` (JSON values)."""

    head: bytes
    middle: bytes
    tail: bytes


# -- the scrubber ------------------------------------------------------------------------------

_B64 = r"A-Za-z0-9_\-+/="
_PATTERNS: Final[list[tuple[re.Pattern[str], str]]] = [
    # PEM private keys (also a truncated one that lost its END line).
    (
        re.compile(
            r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)", re.S
        ),
        "[REDACTED PRIVATE KEY]",
    ),
    # Credentials after an HTTP auth scheme: "Authorization: Bearer <x>", "Basic <b64>".
    (re.compile(r"(?i)\b(bearer|basic)(\s+)[A-Za-z0-9._~+/=:\-]{4,}"), r"\1\2" + REDACTED),
    # Cedarberg API keys, whole (id and secret part alike).
    (re.compile(r"cbk_[A-Za-z0-9._~+/=\-]*"), "cbk_" + REDACTED),
    # JWS / JWE compact serialisations: a base64url JSON header ('{"' or '{ ') and dot-separated parts.
    (re.compile(r"ey[JA][A-Za-z0-9_\-]{6,}\.[A-Za-z0-9_\-]*(?:\.[A-Za-z0-9_\-]*)*"), REDACTED),
    # key=value (query strings, form bodies) and "key": "value" (JSON text) with a secret-naming key.
    (
        re.compile(
            r"(?i)\b((?:client_|access_|refresh_|id_)?(?:secret|password|passwd|pwd|token|"
            r"api[_\-]?key|credential|authorization|private[_\-]?key|cookie)s?)"
            r"(\s*=\s*|\"\s*:\s*\"?|'\s*:\s*'?)([^\s\"'&,;}]+)"
        ),
        r"\1\2" + REDACTED,
    ),
]
_RANDOM_RUN: Final = re.compile(rf"[{_B64}]{{32,}}")
_SECRET_KEY: Final = re.compile(
    r"(?i)(secret|passw|pwd|token|authorization|api[_\-]?key|credential|private[_\-]?key|cookie|signature)"
)


def _looks_random(match: re.Match[str]) -> str:
    run = match.group(0)
    if any(c.isupper() for c in run) and any(c.islower() for c in run) and any(c.isdigit() for c in run):
        return REDACTED
    return run


def scrub_text(text: str, free_form: bool = True, max_length: int | None = MAX_STRING) -> str:
    """``text`` with every secret-looking part replaced by ``[REDACTED]``, cut to ``max_length``
    characters (None: no cut). ``free_form`` also removes long random-looking runs (see the
    module docstring)."""
    if max_length is not None and len(text) > max_length * 2:
        text = text[: max_length * 2]  # bound the regex work; cut again below
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    if free_form:
        text = _RANDOM_RUN.sub(_looks_random, text)
    if max_length is not None and len(text) > max_length:
        text = text[:max_length] + "...[truncated]"
    return text


def scrub(value: Any, free_form: bool = True, _depth: int = 0) -> Any:
    """A copy of ``value`` (str, number, bool, None, or mappings/sequences of them) in which every
    string is scrubbed and every mapping value under a secret-naming key (``password``, ``token``,
    ``client_secret``, ``authorization``, ...) is ``[REDACTED]``. Other objects become their
    scrubbed ``str``."""
    if isinstance(value, str):
        return scrub_text(value, free_form)
    if value is None or isinstance(value, bool | int | float):
        return value
    if _depth >= _MAX_DEPTH:
        return "[nested too deep]"
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            name = scrub_text(str(key), free_form)
            out[name] = REDACTED if _SECRET_KEY.search(str(key)) else scrub(item, free_form, _depth + 1)
        return out
    if isinstance(value, list | tuple | set | frozenset):
        return [scrub(item, free_form, _depth + 1) for item in value]
    return scrub_text(str(value), free_form)


class SecretScrubbingFilter(logging.Filter):
    """Scrubs the message and arguments of every log record passing through it (install it on
    the handlers, so records from every logger are covered)."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except (TypeError, ValueError):  # a broken format string: keep what there is
            message = str(record.msg)
        record.msg = scrub_text(message, max_length=None)
        record.args = None
        if record.exc_info and record.exc_info[1] is not None and not record.exc_text:
            # Render the traceback now so that handlers print the scrubbed text, not the raw one.
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = scrub_text(record.exc_text, max_length=None)
            record.exc_info = None
        if record.stack_info:
            record.stack_info = scrub_text(record.stack_info, max_length=None)
        return True


# -- the log -----------------------------------------------------------------------------------

_BATCH_PAUSE_SECONDS: Final = 0.01
_STOP: Final = object()
_REOPEN: Final = object()


def _write_all(stream: IO[bytes], data: bytes) -> None:
    view = memoryview(data)
    while view:  # a raw (unbuffered) write may be partial
        written = stream.write(view)
        if not written:
            raise OSError("audit log write made no progress")
        view = view[written:]


_second: tuple[int, str] = (-1, "")


def _utc_now() -> str:
    """ISO 8601 UTC with milliseconds; the date-time part is formatted once per second."""
    global _second  # noqa: PLW0603 - a one-entry cache, replaced whole (safe across threads)
    now = time.time()
    whole = int(now)
    cached = _second
    if cached[0] != whole:
        cached = _second = (whole, time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(whole)))
    return f"{cached[1]}.{int((now - whole) * 1000):03d}Z"


# Names, actions, resources, addresses and policy ids repeat from request to request: each distinct
# string is scrubbed once. Bounded, so unique strings cannot grow it.
@functools.lru_cache(maxsize=8192)
def _scrub_repeated(text: str, free_form: bool) -> str:
    return scrub_text(text, free_form)


# The gateway's own request ids (uuid4 hex) are never secret-looking; only client-chosen ids are
# scrubbed.
_OWN_REQUEST_ID: Final = re.compile(r"[0-9a-f]{32}")


def _scrub_request_id(request_id: str | None) -> str | None:
    if request_id is None or _OWN_REQUEST_ID.fullmatch(request_id):
        return request_id
    return scrub_text(request_id)


def _scrub_short(text: str | None) -> str | None:
    return None if text is None else _scrub_repeated(text, False)


class AuditLog:
    """Writes audit records as JSON lines from a background thread. Thread-safe."""

    def __init__(self, settings: AuditSettings) -> None:
        self._settings = settings
        # Lines and markers (flush events, _REOPEN, _STOP) in order; drained by the writer.
        self._pending: collections.deque[object] = collections.deque()
        self._wake = threading.Event()  # set by a producer that finds the writer idle
        self._writer_idle = False
        self._stream: IO[bytes] | None = None
        self._text_stream: IO[str] | None = None
        self._healthy = True
        self._closed = False
        self._lock = threading.Lock()
        self._open_stream()
        self._thread = threading.Thread(target=self._run, name="cedarberg-audit", daemon=True)
        self._thread.start()

    @classmethod
    def open(cls, settings: AuditSettings) -> AuditLog:
        """Open the destination and start the writer. Raises `OSError` if the file cannot be
        opened (so a bad path stops start-up instead of losing the audit trail)."""
        return cls(settings)

    @property
    def settings(self) -> AuditSettings:
        return self._settings

    @property
    def healthy(self) -> bool:
        """False once a write has failed (for readiness checks)."""
        return self._healthy

    # -- recording ---------------------------------------------------------------------------

    def record(self, event: AuditEvent) -> None:
        """Queue one audit line for `event`. Raises `RuntimeError` once the log is closed, and
        `ValueError` for a decision or outcome that is not one of the enums' values."""
        self.record_template(self.template(event), event.request_id)

    def template(self, event: AuditEvent) -> AuditTemplate:
        """`event`'s audit line, scrubbed and rendered once, with its time and request id left
        open (the request id of `event` is ignored): a replayed request plan writes the same line
        as the request it was recorded from. Raises `ValueError` like `record`."""
        principal, client_address = event.principal, event.client_address
        record = {
            "time": _TIME_SLOT,
            "event": event.kind.value,
            "request_id": _REQUEST_ID_SLOT,
            "principal": _scrub_short(principal.id) if principal else None,
            "principal_kind": principal.kind.value if principal else None,
            "auth_method": principal.auth_method.value if principal else None,
            "client_address": None if client_address is None else _scrub_repeated(client_address, True),
            "action": _scrub_short(event.action),
            "resource": _scrub_short(event.resource),
            "decision": Ruling(event.decision).value,
            "policy_ids": [_scrub_short(policy_id) for policy_id in event.policy_ids],
            "policy_version": _scrub_short(event.policy_version),
            "outcome": None if event.outcome is None else Outcome(event.outcome).value,
            "status": event.status,
            "detail": scrub(event.detail),
        }
        line = orjson.dumps(record) + b"\n"
        head, _, rest = line.partition(b'"' + _TIME_SLOT.encode() + b'"')
        middle, _, tail = rest.partition(b'"' + _REQUEST_ID_SLOT.encode() + b'"')
        return AuditTemplate(head, middle, tail)

    def record_template(self, template: AuditTemplate, request_id: str | None) -> None:
        """Queue `template`'s line with the current time and `request_id`. Raises `RuntimeError`
        once the log is closed."""
        if self._closed:
            raise RuntimeError("audit log is closed")
        self._put(
            b"".join(
                (
                    template.head,
                    orjson.dumps(_utc_now()),
                    template.middle,
                    orjson.dumps(_scrub_request_id(request_id)),
                    template.tail,
                )
            )
        )

    # -- flushing and life cycle -------------------------------------------------------------

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until every record made before this call is written; False on timeout."""
        if not self._thread.is_alive():
            return True
        done = threading.Event()
        self._put(done)
        return done.wait(timeout)

    async def aflush(self) -> bool:
        """`flush` without blocking the event loop."""
        return await asyncio.to_thread(self.flush)

    def reopen(self) -> None:
        """Close and reopen the file destination (after log rotation); no-op for stdout."""
        self._put(_REOPEN)

    def close(self, timeout: float = 30.0) -> None:
        """Write what is queued, stop the writer and close the file. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._put(_STOP)
        self._thread.join(timeout)
        self._close_stream()

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)

    # -- the writer thread -------------------------------------------------------------------

    def _open_stream(self) -> None:
        if self._settings.destination == "stdout":
            buffer = getattr(sys.stdout, "buffer", None)
            if buffer is not None:
                self._stream = buffer
            else:
                self._text_stream = sys.stdout
            return
        path = Path(self._settings.destination)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | getattr(os, "O_CLOEXEC", 0), 0o600)
        # Unbuffered: the writer thread batches lines itself, one write() per batch.
        self._stream = os.fdopen(fd, "ab", buffering=0)

    def _close_stream(self) -> None:
        stream, self._stream = self._stream, None
        if stream is not None and self._settings.destination != "stdout":
            try:
                stream.close()
            except OSError:
                self._healthy = False
                log.exception("audit log %s could not be closed", self._settings.destination)

    def _write(self, data: bytes) -> None:
        try:
            if self._stream is not None:
                _write_all(self._stream, data)
                self._stream.flush()
            elif self._text_stream is not None:
                self._text_stream.write(data.decode())
                self._text_stream.flush()
        except (OSError, ValueError):
            self._healthy = False
            log.exception("audit log write to %s failed", self._settings.destination)

    def _put(self, item: object) -> None:
        """Hand `item` to the writer; wait while it is `queue_size` lines behind."""
        pending = self._pending
        if len(pending) >= self._settings.queue_size:
            self._wait_for_room()
        pending.append(item)
        if self._writer_idle:
            self._wake.set()

    def _wait_for_room(self) -> None:
        # Back-pressure, as a bounded queue's put would block; rare (the writer drains every
        # batch pause), so polled rather than signalled per record.
        while len(self._pending) >= self._settings.queue_size and self._thread.is_alive():
            self._wake.set()
            time.sleep(_BATCH_PAUSE_SECONDS / 10)

    def _take_batch(self) -> list[object]:
        """Everything pending, waiting (idle) until there is something."""
        pending = self._pending
        while not pending:
            # Idle is announced before the emptiness is checked again, so a producer that
            # appends in between sees it and wakes the writer: no record waits for a timeout.
            self._writer_idle = True
            if not pending:
                self._wake.wait()
            self._wake.clear()
            self._writer_idle = False
        batch = []
        while pending:
            batch.append(pending.popleft())
        return batch

    def _run(self) -> None:
        while True:
            lines: list[bytes] = []
            stop = False
            for item in self._take_batch():
                if isinstance(item, bytes):
                    lines.append(item)
                    continue
                if lines:  # keep order: what came before a marker is written before it acts
                    self._write(b"".join(lines))
                    lines = []
                if isinstance(item, threading.Event):
                    item.set()
                elif item is _REOPEN:
                    self._reopen_now()
                elif item is _STOP:
                    stop = True
            if lines:
                self._write(b"".join(lines))
            if stop:
                return
            # Gather the next batch for a moment: a writer woken for every record would take the
            # interpreter lock from the event loop thousands of times a second.
            time.sleep(_BATCH_PAUSE_SECONDS)

    def _reopen_now(self) -> None:
        if self._settings.destination == "stdout":
            return
        try:
            self._close_stream()
            self._open_stream()
            self._healthy = True
        except OSError:
            self._healthy = False
            log.exception("audit log %s could not be reopened", self._settings.destination)
