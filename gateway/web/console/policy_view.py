"""What the Policies page and the change preview show: plain rows for the templates, read from the
active policy set (`PolicyEngine.status`, the document `GET /admin/v1/policies` answers), its
fixture results, and the preview's answer (the document `POST /admin/v1/policies/preview`
answers), never computed a second way."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final
from urllib.parse import quote

from cedarberg.gateway.authz.fixtures import FixtureResult
from cedarberg.gateway.authz.loader import SCHEMA_FILE

POLICIES: Final = "/console/policies"
PREVIEW: Final = f"{POLICIES}/preview"


def file_url(name: str, line: int | None = None) -> str:
    """The page of the active set's file `name`, at `line` (its anchor) if given."""
    anchor = f"#L{line}" if line else ""
    return f"{POLICIES}/files/{quote(name, safe='')}{anchor}"


@dataclass(frozen=True, slots=True)
class PolicyRow:
    id: str
    effect: str  # "permit" / "forbid"
    line: int
    url: str  # the file's page at the policy's first line


@dataclass(frozen=True, slots=True)
class FileRow:
    name: str
    url: str
    lines: int
    policies: tuple[PolicyRow, ...]
    schema: bool


def _located(location: str) -> tuple[str, int]:
    name, _, line = location.rpartition(":")
    return name, int(line) if line.isdigit() else 0


def file_rows(status: Mapping[str, Any], effects: Mapping[str, str]) -> list[FileRow]:
    """The active set's files in name order (the schema first), each with its policies in line
    order, from `status` (`PolicyEngine.status()`)."""
    sources: Mapping[str, str] = status["files"]
    by_file: dict[str, list[PolicyRow]] = {name: [] for name in sources}
    for policy_id, location in status["policies"].items():
        name, line = _located(location)
        by_file.setdefault(name, []).append(
            PolicyRow(policy_id, effects.get(policy_id, ""), line, file_url(name, line))
        )
    order = sorted(sources, key=lambda name: (name != SCHEMA_FILE, name))
    return [
        FileRow(
            name,
            file_url(name),
            sources[name].count("\n") + (0 if sources[name].endswith("\n") else 1),
            tuple(sorted(by_file.get(name, ()), key=lambda row: row.line)),
            name == SCHEMA_FILE,
        )
        for name in order
    ]


@dataclass(frozen=True, slots=True)
class SourceLine:
    number: int
    text: str
    starts: str | None  # the id of the policy starting on this line, if any


def source_lines(text: str, starts: Mapping[int, str]) -> list[SourceLine]:
    """A file's lines, numbered from 1, marking where each policy starts (`starts`: line -> id)."""
    lines = text.split("\n")
    if text.endswith("\n"):
        lines.pop()  # the final newline ends the last line; it starts none
    return [SourceLine(i, line, starts.get(i)) for i, line in enumerate(lines, start=1)]


def policy_starts(status: Mapping[str, Any], name: str) -> dict[int, str]:
    """line -> policy id for the policies of the active file `name`."""
    starts: dict[int, str] = {}
    for policy_id, location in status["policies"].items():
        file_name, line = _located(location)
        if file_name == name:
            starts[line] = policy_id
    return starts


def fixture_rows(results: Sequence[FixtureResult]) -> dict[str, Any]:
    """Fixture results as the page lists them: failures first, then the rest in path order."""
    failed = [r for r in results if not r.passed]
    return {
        "passed": len(results) - len(failed),
        "failed": len(failed),
        "rows": [
            {
                "path": r.path,
                "expected": r.expected,
                "passed": r.passed,
                "message": r.message,
                "decision": None if r.decision is None else ("allow" if r.decision.allowed else "deny"),
                "policy_ids": [] if r.decision is None else list(r.decision.policy_ids),
            }
            for r in [*failed, *(r for r in results if r.passed)]
        ],
    }


def answered_fixture_rows(fixtures: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """The preview answer's `fixtures`, failures first (the rows are the answer's own)."""
    if fixtures is None:
        return None
    results: list[Mapping[str, Any]] = list(fixtures["results"])
    ordered = [r for r in results if not r["passed"]] + [r for r in results if r["passed"]]
    return {"passed": fixtures["passed"], "failed": fixtures["failed"], "rows": ordered}


def incomplete_reasons(decisions: Mapping[str, Any] | None) -> list[str]:
    """Why the re-decided decisions are not all of those asked for, in words (none: complete)."""
    if decisions is None:
        return []
    reasons: list[str] = []
    audit: Mapping[str, Any] = decisions.get("audit") or {}
    if not decisions.get("complete", True):
        reasons.append(f"stopped early: {decisions.get('stopped') or 'a bound was reached'}")
    if audit.get("bytes_bound_reached"):
        reasons.append(
            "the audit bytes bound (authz.preview.max_audit_bytes) was reached: older decisions were not read"
        )
    if audit.get("unavailable"):
        reasons.append(str(audit["unavailable"]))
    return reasons
