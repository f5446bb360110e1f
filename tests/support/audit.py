"""Reading a gateway's JSON-lines audit log from tests, and a mutation's record to write to one."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from cedarberg.gateway.audit import AuditEvent, EventKind, Outcome
from cedarberg.gateway.authn.principal import AuthMethod, Principal, PrincipalKind

FLUSH_SECONDS = 0.3  # the audit writer thread flushes in batches
APPEAR_SECONDS = 5.0
WRITER = Principal(id="etl", kind=PrincipalKind.SERVICE, groups=frozenset(), auth_method=AuthMethod.API_KEY)


def mutation_event(request_id: str, padding: int = 300) -> AuditEvent:
    """A namespace creation's outcome record; `padding` characters of detail (300: a line of about
    700 bytes, so a page holds a few)."""
    return AuditEvent(
        EventKind.MUTATION,
        request_id=request_id,
        principal=WRITER,
        action="createNamespace",
        resource=f'Cedarberg::Namespace::"default/{request_id}"',
        outcome=Outcome.SUCCESS,
        status=200,
        detail={"padding": "x" * padding},
    )


def audit_log(path: Path) -> list[dict[str, Any]]:
    """The records in the log at `path` now ([] while it does not exist)."""
    return _records(path) if path.exists() else []


def flushed_audit_log(path: Path) -> list[dict[str, Any]]:
    """The records of a running gateway's log, once its writer has flushed what it was given
    (the file is created with the first record)."""
    deadline = time.monotonic() + APPEAR_SECONDS
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(FLUSH_SECONDS)
    return _records(path)  # a log that never appeared is an error, not "no records"


def _records(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
