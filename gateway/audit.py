"""The audit log: one JSON line per authorization decision and per mutation.

Public API::

    audit = AuditLog.open(AuditSettings(destination="stdout" | "/var/log/cedarberg/audit.jsonl"))
    audit.record(AuditEvent(EventKind.DECISION, request_id=..., principal=..., action=...,
                            resource=..., decision="allow", policy_ids=[...], policy_version=...))
    audit.record(AuditEvent(EventKind.MUTATION, request_id=..., principal=..., action=...,
                            resource=..., outcome="success"))
    await audit.durable()                       # a mutation's records are written (and synced)
    audit.flush()  /  await audit.aflush()      # wait until everything recorded so far is written
    audit.reopen()                              # after log rotation (e.g. on SIGHUP)
    audit.close()
    scrub(value) -> value                       # the scrubber, also for other logs:
    SecretScrubbingFilter()                     # a logging.Filter that scrubs every record

Every line has the same keys, in this order (``null`` where a key does not apply): ``time``
(ISO-8601 UTC, milliseconds, ``Z``), ``stream`` (always ``"audit"``: the process log's lines
have no such key), ``event`` (`EventKind`: ``decision`` | ``mutation`` | ``auth_failure`` |
``throttled``), ``request_id``, ``principal`` (the namespaced id, ``key:etl``), ``principal_kind``,
``auth_method``, ``actor`` (the engine acting for the principal, when it was delegated),
``client_address``, ``action``, ``resource``, ``decision`` (``allow`` | ``deny``), ``policy_ids``
(determining policies), ``policy_version``, ``outcome`` (mutations: ``success`` | ``failure`` |
``unknown``), ``status`` (the HTTP status the client got: a mutation's, a denial's, a refusal's),
``detail``, ``cedar_request`` (a policy decision's Cedar request: principal, resource, context
and entities as the engine decided on them, so that a change preview can decide it again;
`gateway.decision_record`). ``time``, ``request_id`` and ``principal`` are the process log's
fields of the same names, in the same form (`gateway.logs`), so a request's log lines and audit
records join on them.

What ``detail`` holds, by record: a denial's ``reason``; an allowed load or scan plan that column,
row or mask restrictions narrowed, its ``restrictions`` (policy id, columns kept, row filter,
masks); a created API key's ``key_id``; an ``auth_failure`` or ``throttled`` record's ``reason``,
``count`` (the refusals it stands for), ``window_seconds`` and, for a failed authentication, the
``presented_key_id`` (an API key's public id, never its secret). Those two are aggregated per
client address, action and reason (`gateway.audit_refusals`) so that a flood cannot fill the disk.

Invariants:

- **Recording never blocks the event loop on I/O.** `record` scrubs and serialises (orjson, a few
  µs) and appends the line to a deque the writer thread drains (an append is atomic under the
  interpreter lock: no lock, no condition and no wake-up per record; the writer is woken only when
  it had gone idle); the thread (`gateway.audit_writer`) writes whatever has queued up in one
  ``write`` per batch. Records are never dropped: if the writer falls ``queue_size`` lines
  behind, recording waits for it (back-pressure); while the destination fails, they are kept
  and written when it recovers, and recording is refused (`AuditUnavailableError`, 503) once no
  more may be kept. A write error is logged (``cedarberg.audit``) and makes `healthy` false.
- **A mutation is acknowledged only once its records are durable**: the pipeline awaits
  `durable` before the change is applied (its decisions) and before it is acknowledged (its
  outcome), see `gateway.web.middlewares`.
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
import functools
import logging
import re
import time
from collections.abc import Iterable, Mapping
from dataclasses import KW_ONLY, dataclass
from enum import StrEnum
from typing import Any, Final

import orjson

from cedarberg.gateway.audit_writer import AuditObserver, AuditUnavailableError, AuditWriter
from cedarberg.gateway.authn.principal import Principal
from cedarberg.gateway.config.audit import AuditSettings
from cedarberg.gateway.log_fields import extra_fields

__all__ = [
    "AuditEvent",
    "AuditLog",
    "AuditObserver",
    "AuditUnavailableError",
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
    AUTH_FAILURE = "auth_failure"  # 401s from one address, aggregated (`gateway.audit_refusals`)
    THROTTLED = "throttled"  # 429s from one address, aggregated (`gateway.audit_refusals`)


# Tells audit lines from the process log's (which share `time`, `request_id`, `principal`) when
# both go to one collector.
STREAM = "audit"


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
    # A policy decision's Cedar request, rendered and scrubbed by `gateway.decision_record`.
    cedar_request: orjson.Fragment | None = None


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
# What every match of a `_PATTERNS` entry contains (a superset: each pattern's own literal start,
# without its context): a text in which this finds nothing is left alone by all of them, at the
# cost of one search instead of one substitution per pattern.
_MIGHT_HOLD_SECRET: Final = re.compile(
    r"-----BEGIN |cbk_|ey[JA]|(?i:bearer|basic)"
    r"|(?i:(?:secret|password|passwd|pwd|token|api[_\-]?key|credential|authorization"
    r"|private[_\-]?key|cookie)s?(?:\s*=|[\"']\s*:))"
)
_RANDOM_RUN: Final = re.compile(rf"[{_B64}]{{32,}}")
_SECRET_KEY: Final = re.compile(
    r"(?i)(secret|passw|pwd|token|authorization|api[_\-]?key|credential|private[_\-]?key|cookie|signature)"
)


# Lower-case literals: every match of `_MIGHT_HOLD_SECRET` holds one of `_SCRUB_WORDS` in some
# case, every match of `_SECRET_KEY` one of `_KEY_WORDS`. A case-insensitive alternation tries
# every word at every position (about 40 µs for a 250-character entity); a substring search per
# word is a few microseconds, so the expressions run only on the texts the words are found in.
_SCRUB_WORDS: Final = (
    "-----begin ", "cbk_", "eyj", "eya", "bearer", "basic", "secret", "passw", "pwd", "token", "api",
    "credential", "authorization", "private", "cookie",
)  # fmt: skip
_KEY_WORDS: Final = (
    "secret", "passw", "pwd", "token", "authorization", "api", "credential", "private", "cookie", "signature",
)  # fmt: skip
_ANY_WORDS: Final = tuple(dict.fromkeys(_SCRUB_WORDS + _KEY_WORDS))


def _holds_none_of(text: str, words: tuple[str, ...]) -> bool:
    """Whether `text` surely holds none of `words` in any case. Only an ASCII text is sure:
    under IGNORECASE an expression also matches non-ASCII case variants that `lower()` leaves
    alone (the long s U+017F matches "s", the Kelvin sign U+212A matches "k")."""
    if not text.isascii():
        return False
    lowered = text.lower()
    return all(word not in lowered for word in words)


def may_hold_secret(text: str) -> bool:
    """Whether `scrub_text` (without its length cut) could change any part of `text`, or
    `names_secret` flag any part of it. Neither search is anchored or looks around, so a text in
    which both find nothing holds no part they would find anything in: False means every string
    and key written literally in `text` is left as it is."""
    if _holds_none_of(text, _ANY_WORDS):
        return False
    return _MIGHT_HOLD_SECRET.search(text) is not None or _SECRET_KEY.search(text) is not None


def names_secret(key: str) -> bool:
    """Whether a mapping key names a secret (``password``, ``token``, ``api_key``, ...): its value
    is written as ``[REDACTED]``."""
    return not _holds_none_of(key, _KEY_WORDS) and _SECRET_KEY.search(key) is not None


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
    if not _holds_none_of(text, _SCRUB_WORDS) and _MIGHT_HOLD_SECRET.search(text) is not None:
        for pattern, replacement in _PATTERNS:
            text = pattern.sub(replacement, text)
    if free_form:
        text = _RANDOM_RUN.sub(_looks_random, text)
    if max_length is not None and len(text) > max_length:
        text = text[:max_length] + "...[truncated]"
    return text


def scrub(value: Any, free_form: bool = True, _depth: int = 0, *, max_length: int | None = MAX_STRING) -> Any:
    """A copy of ``value`` (str, number, bool, None, or mappings/sequences of them) in which every
    string is scrubbed (and cut to ``max_length``, None: not cut) and every mapping value under a
    secret-naming key (``password``, ``token``, ``client_secret``, ``authorization``, ...) is
    ``[REDACTED]``. Other objects become their scrubbed ``str``."""
    if isinstance(value, str):
        return scrub_text(value, free_form, max_length)
    if value is None or isinstance(value, bool | int | float):
        return value
    if _depth >= _MAX_DEPTH:
        return "[nested too deep]"
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for key, item in value.items():
            name = scrub_text(str(key), free_form, max_length)
            out[name] = (
                REDACTED
                if names_secret(str(key))
                else scrub(item, free_form, _depth + 1, max_length=max_length)
            )
        return out
    if isinstance(value, list | tuple | set | frozenset):
        return [scrub(item, free_form, _depth + 1, max_length=max_length) for item in value]
    return scrub_text(str(value), free_form, max_length)


class SecretScrubbingFilter(logging.Filter):
    """Scrubs the message, arguments, traceback and structured fields (`extra=`) of every log
    record passing through it (install it on the handlers, so records from every logger are
    covered). A field whose name names a secret (``token``, ``password``, ...) is
    ``[REDACTED]`` whole; any other field is scrubbed like a mapping value (`scrub`)."""

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
        for name, value in extra_fields(record).items():
            # Scrubbed whole, like the message: the formatters cut what is scrubbed (log_fields).
            setattr(record, name, REDACTED if names_secret(name) else scrub(value, max_length=None))
        return True


# -- the log -----------------------------------------------------------------------------------

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
    """Scrubs and renders audit records and hands them to the writer thread
    (`gateway.audit_writer.AuditWriter`, which knows whether the destination takes them).
    Thread-safe."""

    def __init__(self, settings: AuditSettings) -> None:
        self._settings = settings
        self._writer = AuditWriter(settings)

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
        """False while the destination cannot take records (for readiness checks); true again
        once the writer's retry succeeds."""
        return self._writer.healthy

    def observe(self, observer: AuditObserver) -> None:
        """Report the destination's health and failed writes to `observer` (the metrics)."""
        self._writer.observe(observer)

    # -- recording ---------------------------------------------------------------------------

    def record(self, event: AuditEvent, *, keep: bool = False) -> None:
        """Queue one audit line for `event`. Raises `RuntimeError` once the log is closed,
        `ValueError` for a decision or outcome that is not one of the enums' values, and
        `AuditUnavailableError` while the destination is failing and no more records may be
        kept (``keep=True``: never; for the outcome of a change already applied)."""
        self.record_template(self.template(event), event.request_id, keep=keep)

    def template(self, event: AuditEvent) -> AuditTemplate:
        """`event`'s audit line, scrubbed and rendered once, with its time and request id left
        open (the request id of `event` is ignored): a replayed request plan writes the same line
        as the request it was recorded from. Raises `ValueError` like `record`."""
        principal, client_address = event.principal, event.client_address
        record = {
            "time": _TIME_SLOT,
            "stream": STREAM,
            "event": event.kind.value,
            "request_id": _REQUEST_ID_SLOT,
            "principal": _scrub_short(principal.id) if principal else None,
            "principal_kind": principal.kind.value if principal else None,
            "auth_method": principal.auth_method.value if principal else None,
            "actor": _scrub_short(principal.actor) if principal else None,
            "client_address": None if client_address is None else _scrub_repeated(client_address, True),
            "action": _scrub_short(event.action),
            "resource": _scrub_short(event.resource),
            "decision": Ruling(event.decision).value,
            "policy_ids": [_scrub_short(policy_id) for policy_id in event.policy_ids],
            "policy_version": _scrub_short(event.policy_version),
            "outcome": None if event.outcome is None else Outcome(event.outcome).value,
            "status": event.status,
            "detail": scrub(event.detail),
            "cedar_request": event.cedar_request,
        }
        line = orjson.dumps(record) + b"\n"
        head, _, rest = line.partition(b'"' + _TIME_SLOT.encode() + b'"')
        middle, _, tail = rest.partition(b'"' + _REQUEST_ID_SLOT.encode() + b'"')
        return AuditTemplate(head, middle, tail)

    def record_template(self, template: AuditTemplate, request_id: str | None, *, keep: bool = False) -> None:
        """Queue `template`'s line with the current time and `request_id`. Raises like `record`."""
        self._writer.put(
            b"".join(
                (
                    template.head,
                    orjson.dumps(_utc_now()),
                    template.middle,
                    orjson.dumps(_scrub_request_id(request_id)),
                    template.tail,
                )
            ),
            keep,
        )

    async def durable(self) -> None:
        """Return once every record made before this call is written to the destination (and
        synced under ``durability = "fsync"``), sharing one write and sync with concurrent
        callers. Raises `AuditUnavailableError` if it cannot be: a mutation must not proceed."""
        await self._writer.durable()

    async def probe(self) -> bool:
        """True if the destination is usable now: not failing, and still the file at the
        configured path (a removed file is reopened first)."""
        return await self._writer.probe()

    # -- flushing and life cycle -------------------------------------------------------------

    def flush(self, timeout: float = 30.0) -> bool:
        """Wait until every record made before this call is written; False if the destination
        is failing (the records are kept) or on timeout."""
        return self._writer.flush(timeout)

    async def aflush(self) -> bool:
        """`flush` without blocking the event loop."""
        return await asyncio.to_thread(self.flush)

    def reopen(self) -> None:
        """Close and reopen the file destination (after log rotation); no-op for stdout."""
        self._writer.reopen()

    def close(self, timeout: float = 30.0) -> None:
        """Write what is queued, stop the writer and close the file. Idempotent."""
        self._writer.close(timeout)

    async def aclose(self) -> None:
        await asyncio.to_thread(self.close)
