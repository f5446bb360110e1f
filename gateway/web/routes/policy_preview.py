"""`POST /admin/v1/policies/preview`: what a policy change would do, before it goes live.

Cedar decides the operation `previewPolicies` on the catalog before the body is read (admins,
with the default policies). The body (`admin_requests.PreviewRequest`) names policy files to
replace or add (`files`, name: text), files to leave out (`removed`), fixtures to run beside the
active directory's (`fixtures`) and how many of the newest audited decisions to decide again
(`decisions`). The answer (`gateway.authz.preview`):

- `valid`, `problems` (FILE:LINE: message, as `cedarberg policies validate` prints them), the
  versions and which files changed;
- `fixtures`: each fixture's result under the candidate set (null when the set is refused);
- `decisions`: the newest audited decisions decided again under the current and the candidate
  set (`gateway.authz.redecide`), read backwards from the audit file and the files rotated
  beside it (`gateway.audit_query.records_from_end`): the counts, and every decision that would
  flip with both rulings and their determining policies (null when the set is refused).

Nothing is written and the candidate is never activated: it is compiled into an engine of its own
that the preview alone uses. Costs are bounded by `[authz.preview]`: the body (413 past
`max_body_bytes`), `decisions` (400 past `max_decisions`), the audit bytes read
(`max_audit_bytes`) and the time spent deciding (`timeout_seconds`, after which the answer says
`complete: false`). One preview runs at a time per worker (the work runs off the event loop).
A malformed body, a file name that is not a policy file's, removing the schema or a file the set
does not have: 400 (BadRequestException).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from cedarberg.catalog.errors import InvalidRequestError
from cedarberg.gateway.audit_query import ReadCounts, records_from_end
from cedarberg.gateway.authz.engine import PolicyEngine
from cedarberg.gateway.authz.errors import ResourceError
from cedarberg.gateway.authz.fixtures import FixtureResult
from cedarberg.gateway.authz.preview import Preview, SuppliedFixture, candidate_sources, preview
from cedarberg.gateway.authz.redecide import DecisionWindow
from cedarberg.gateway.config.preview import DEFAULT_DECISIONS, PolicyPreviewSettings
from cedarberg.gateway.web import http
from cedarberg.gateway.web.keys import security, services
from cedarberg.gateway.web.route import Route
from cedarberg.gateway.web.routes.admin_requests import PreviewRequest

PATH = "/admin/v1/policies/preview"
NO_AUDIT_FILE = 'audit.destination is "stdout": there is no audit file to read decisions from'
_RUNNING = threading.Lock()  # one preview at a time per worker: each may take seconds of CPU


@dataclass(slots=True)
class _AuditSource:
    """Where the audited decisions came from, and what stopped reading them."""

    path: Path | None
    tail: ReadCounts = field(default_factory=ReadCounts)
    unavailable: str | None = None

    def records(self, max_bytes: int) -> Iterator[dict[str, Any]]:
        """The records from the end of the file; a file that cannot be read ends them, and says
        why in `unavailable`."""
        if self.path is None:
            self.unavailable = NO_AUDIT_FILE
            return
        try:
            yield from records_from_end(self.path, max_bytes, self.tail)
        except FileNotFoundError:
            self.unavailable = "the audit file does not exist yet"
        except OSError as err:
            self.unavailable = f"the audit file cannot be read: {err.strerror or err}"

    def to_json(self) -> dict[str, Any]:
        return {
            "source": None if self.path is None else str(self.path),
            "unavailable": self.unavailable,
            "bytes_bound_reached": self.tail.bound_reached,
            "unreadable_lines": self.tail.unreadable_lines,
        }


def _fixture_json(result: FixtureResult) -> dict[str, Any]:
    decision = result.decision
    return {
        "path": result.path,
        "expected": result.expected,
        "passed": result.passed,
        "message": result.message,
        "decision": None if decision is None else ("allow" if decision.allowed else "deny"),
        "policy_ids": [] if decision is None else list(decision.policy_ids),
    }


def _answer(result: Preview, limit: int, audit: _AuditSource) -> dict[str, Any]:
    decisions = None
    if result.redecision is not None:
        redecision = result.redecision
        decisions = {
            "requested": limit,
            "complete": redecision.complete,
            "stopped": redecision.stopped,
            "audit": audit.to_json(),
            **redecision.tally.to_json(),
            "flips": [flip.to_json() for flip in redecision.flips],
        }
    fixtures = None
    if result.fixtures is not None:
        failed = sum(not r.passed for r in result.fixtures)
        fixtures = {
            "passed": len(result.fixtures) - failed,
            "failed": failed,
            "results": [_fixture_json(r) for r in result.fixtures],
        }
    return {
        "valid": result.valid,
        "current_version": result.current_version,
        "candidate_version": result.candidate_version,
        "unchanged": result.candidate_version == result.current_version,
        "files": {
            "changed": list(result.files.changed),
            "added": list(result.files.added),
            "removed": list(result.files.removed),
        },
        "problems": [str(problem) for problem in result.problems],
        "fixtures": fixtures,
        "decisions": decisions,
    }


@dataclass(frozen=True, slots=True)
class _Job:
    engine: PolicyEngine  # the current set's
    sources: dict[str, str]  # the candidate's
    supplied: Sequence[SuppliedFixture]
    audit: _AuditSource
    limit: int
    bounds: PolicyPreviewSettings


def _run(job: _Job) -> dict[str, Any]:
    with _RUNNING:
        records = job.audit.records(job.bounds.max_audit_bytes) if job.limit > 0 else iter(())
        window = DecisionWindow(records, job.limit, time.monotonic() + job.bounds.timeout_seconds)
        result = preview(job.engine, job.sources, job.supplied, window)
        return _answer(result, job.limit, job.audit)


async def run_preview(
    request: web.Request,
    files: Mapping[str, str],
    removed: Sequence[str],
    supplied: Sequence[SuppliedFixture],
    decisions: int | None,
) -> dict[str, Any]:
    """The preview of the active set with `files` replaced or added and `removed` taken out, as
    the endpoint answers it (see the module docstring): the one function behind the endpoint and
    the console's change preview, so the two cannot disagree. `decisions` None: the default.
    Raises InvalidRequestError (400) for more decisions than the bound, a file name that is not a
    policy file's, removing the schema or a file the set does not have."""
    settings = services(request).settings
    bounds = settings.authz.preview
    limit = min(DEFAULT_DECISIONS, bounds.max_decisions) if decisions is None else decisions
    if limit > bounds.max_decisions:
        raise InvalidRequestError(
            f"decisions must be at most {bounds.max_decisions} (authz.preview.max_decisions)"
        )
    sec = security(request)
    active = sec.policies.active
    try:
        sources = candidate_sources(active.sources if active is not None else {}, files, removed)
    except ResourceError as err:
        raise InvalidRequestError(str(err)) from None
    destination = settings.audit.destination
    audit = _AuditSource(None if destination == "stdout" else Path(destination))
    if limit > 0 and audit.path is not None:
        await sec.audit.aflush()  # the decisions recorded so far (this request's too) are in the file
    return await asyncio.to_thread(_run, _Job(sec.policies, sources, supplied, audit, limit, bounds))


async def preview_policies(request: web.Request) -> web.Response:
    """Validate a candidate policy set, run its fixtures, and decide recent audited decisions
    again under it; see the module docstring. Raises InvalidRequestError (400) and
    HTTPRequestEntityTooLarge (413)."""
    bounds = services(request).settings.authz.preview
    body = http.validate(PreviewRequest, await http.json_object(request, bounds.max_body_bytes))
    supplied = [SuppliedFixture(f.expected, f.name, f.fixture) for f in body.fixtures]
    answer = await run_preview(request, body.files, body.removed, supplied, body.decisions)
    return web.Response(body=orjson.dumps(answer), content_type="application/json")


ROUTES = [Route("POST", PATH, preview_policies, "previewPolicies", advertised=False)]
