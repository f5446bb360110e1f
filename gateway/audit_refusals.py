"""Failed authentications (401) and throttled requests (429) in the audit log, aggregated.

    tally = RefusalTally(audit, interval_seconds=60, max_sources=10_000)
    tally.note(Source(EventKind.AUTH_FAILURE, "203.0.113.7", "listNamespaces",
                      "credential refused", presented_key_id="abcdefghijklmnop"), request_id=...)
    tally.flush()                 # at each interval's end (`run` does it), and at shutdown

Each refusal is counted under its `Source`: event, client address, action, reason, presented key
id, and for a throttled principal its id. The first refusal of a source in an interval is
recorded at once (``count`` 1, with its request id), so one failed attempt is on record as soon
as it happens; the others of that interval are only counted, and at the interval's end one record
per source says how many there were (``count``, ``window_seconds``). A source therefore writes at
most two records per interval, whatever the number of requests: a flood of a million bad
credentials from one address is a handful of lines.

Bounded: at most ``max_sources`` sources are tracked per interval; refusals from further sources
are counted under one overflow source per event kind (client address ``"*"``, reason
``"other sources (tracking limit reached)"``). Every part of a source is bounded (addresses and
actions cut to `MAX_PART_CHARS`, reasons are the gateway's own fixed strings, a key id is
recorded only in its exact 16-character shape), so memory is bounded in entries and bytes.

`note` is O(1): one dictionary lookup and an increment (plus one rendered record for a source's
first refusal in the interval). Nothing here holds a secret: a presented key id is the key's
public id, never what follows it, and nothing is read from a credential but that id.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass

from cedarberg.gateway.audit import AuditEvent, AuditLog, AuditUnavailableError, EventKind
from cedarberg.gateway.authn.principal import Principal

__all__ = ["OVERFLOW_ADDRESS", "OVERFLOW_REASON", "RefusalTally", "Source"]

log = logging.getLogger("cedarberg.audit")

MAX_PART_CHARS = 128
OVERFLOW_ADDRESS = "*"
OVERFLOW_REASON = "other sources (tracking limit reached)"
_STATUS = {EventKind.AUTH_FAILURE: 401, EventKind.THROTTLED: 429}


@dataclass(frozen=True, slots=True)
class Source:
    """Where refusals come from; refusals of one source in one interval are aggregated. Every
    part is cut to `MAX_PART_CHARS`."""

    kind: EventKind  # AUTH_FAILURE (401) or THROTTLED (429)
    client_address: str
    action: str
    reason: str  # one of the gateway's fixed reasons, never client text
    presented_key_id: str | None = None  # an API key's public id, exactly as `is_key_id` accepts
    principal_id: str | None = None  # a throttled principal

    def __post_init__(self) -> None:
        # Bounded whatever a client sends (a frozen dataclass: set once, here).
        for name in ("client_address", "action", "reason", "principal_id"):
            value = getattr(self, name)
            if value is not None and len(value) > MAX_PART_CHARS:
                object.__setattr__(self, name, value[:MAX_PART_CHARS])


@dataclass(slots=True)
class _Count:
    principal: Principal | None  # a throttled principal (429 after authentication), else None
    suppressed: int = 0  # refusals after the first one of the interval (the first is recorded)


class RefusalTally:
    """Counts 401 and 429 refusals per source and writes them to the audit log, at most two
    records per source per interval (see the module docstring). Used from the event loop only."""

    def __init__(self, audit: AuditLog, interval_seconds: float, max_sources: int) -> None:
        self._audit = audit
        self._interval = interval_seconds
        self._max_sources = max_sources
        self._counts: dict[Source, _Count] = {}
        self._task: asyncio.Task[None] | None = None

    @property
    def tracked(self) -> int:
        """Sources counted in the current interval (at most ``max_sources`` plus the overflow ones)."""
        return len(self._counts)

    def note(self, source: Source, principal: Principal | None = None, request_id: str | None = None) -> None:
        """Count one refusal from `source` (`principal`: the throttled one, whose id `source`
        names); record it now if it is its source's first in this interval. Never raises for the
        audit destination's state: a refusal that cannot be recorded now is counted and written
        with the interval's summary."""
        count = self._counts.get(source)
        if count is not None:
            count.suppressed += 1
            return
        if len(self._counts) >= self._max_sources:
            overflow = Source(source.kind, OVERFLOW_ADDRESS, "*", OVERFLOW_REASON)
            count = self._counts.get(overflow)
            if count is None:
                count = self._counts[overflow] = _Count(None)
            count.suppressed += 1
            return
        self._counts[source] = count = _Count(principal)
        try:
            self._record(source, count.principal, 1, request_id, first=True)
        except AuditUnavailableError:
            count.suppressed += 1  # written with the summary, once the destination takes records

    def flush(self) -> int:
        """End the interval: one record per source that was refused again after its first record,
        with how many times. Returns the number of records written."""
        counts, self._counts = self._counts, {}
        written = 0
        for source, count in counts.items():
            if count.suppressed:
                self._record(source, count.principal, count.suppressed, None, first=False)
                written += 1
        return written

    def _record(
        self, source: Source, principal: Principal | None, count: int, request_id: str | None, *, first: bool
    ) -> None:
        detail: dict[str, object] = {
            "reason": source.reason,
            "count": count,
            "window_seconds": self._interval,
            "first_in_window": first,
        }
        if source.presented_key_id is not None:
            detail["presented_key_id"] = source.presented_key_id
        self._audit.record(
            AuditEvent(
                source.kind,
                request_id=request_id,
                principal=principal,
                action=source.action,
                resource="",
                decision="deny",
                status=_STATUS[source.kind],
                client_address=source.client_address or None,
                detail=detail,
            ),
            # A summary is the only record of what it counts: kept even while the destination
            # fails (bounded: one per source per interval).
            keep=not first,
        )

    # -- the interval's clock ----------------------------------------------------------------

    def start(self) -> None:
        """Flush at the end of every interval, in a task of the running loop."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._interval)
            try:
                self.flush()
            except Exception:  # the summary is lost, not the gateway: say so and go on
                log.exception("could not write the refusal summary to the audit log")

    async def stop(self) -> None:
        """Stop the clock and write what the current interval counted (at shutdown)."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        self.flush()
