"""A policy change preview: what a candidate set would do, before anything goes live.

    sources = candidate_sources(active.sources, files={"grants.cedar": text}, removed=["old.cedar"])
    result = preview(engine, sources, supplied_fixtures, DecisionWindow(audit_records, limit=500))

The candidate is the active set with `files` replaced or added and `removed` taken out. It is
compiled and checked exactly as a policy directory is loaded (`PolicyEngine.load_sources`: parse,
schema validation, the gateway's contract), into an engine of its own that exists only for the
preview: it is never the active set, decides no request, writes nothing and is not logged as
loaded. A set that is refused answers its problems (FILE:LINE: message) and nothing else. A set
that loads runs the fixtures of the active directory (`tests/ALLOW`, `tests/DENY`) with any the
caller supplies (a supplied fixture replaces the directory's of the same path), and decides the
audited decisions again under the current and the candidate set (`redecide`).

Raises `ResourceError` (`candidate_sources`) for file names that are not a policy directory's.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

from cedarberg.gateway.authz.engine import PolicyEngine
from cedarberg.gateway.authz.errors import PolicyLoadError, PolicyProblem, ResourceError
from cedarberg.gateway.authz.fixtures import (
    FIXTURE_DIR,
    FixtureResult,
    fixture_files,
    run_fixture,
    run_fixture_data,
)
from cedarberg.gateway.authz.loader import MAX_FILE_BYTES, POLICY_SUFFIX, SCHEMA_FILE, content_version
from cedarberg.gateway.authz.redecide import DecisionWindow, Redecision, redecide

# A policy file's name as a directory holds it: no directory part, no hidden file.
POLICY_FILE_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}" + re.escape(POLICY_SUFFIX))
FIXTURE_FILE_NAME: Final = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}\.json")


@dataclass(frozen=True, slots=True)
class SuppliedFixture:
    """A fixture the caller adds: `tests/<expected>/<name>` of the candidate's directory."""

    expected: str  # ALLOW or DENY
    name: str
    document: Any  # the decoded fixture (fixtures.py's format)

    @property
    def label(self) -> str:
        return f"{FIXTURE_DIR}/{self.expected}/{self.name}"


@dataclass(frozen=True, slots=True)
class FileChanges:
    changed: tuple[str, ...]
    added: tuple[str, ...]
    removed: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Preview:
    """The outcome of a preview. `fixtures` and `redecision` are None when the set is refused."""

    current_version: str
    candidate_version: str
    files: FileChanges
    problems: tuple[PolicyProblem, ...]
    fixtures: tuple[FixtureResult, ...] | None
    redecision: Redecision | None

    @property
    def valid(self) -> bool:
        return not self.problems


def candidate_sources(
    active: Mapping[str, str], files: Mapping[str, str], removed: Iterable[str]
) -> dict[str, str]:
    """The active sources with `files` replaced or added and `removed` taken out. Raises
    `ResourceError` for a name that is not `schema.cedarschema` or a plain `*.cedar` file name, a
    removed file the set does not have (or the schema), or a file both given and removed."""
    gone = list(removed)
    for name in files:
        if name != SCHEMA_FILE and not POLICY_FILE_NAME.fullmatch(name):
            raise ResourceError(
                f"not a policy file name: {name!r} ({SCHEMA_FILE} or NAME{POLICY_SUFFIX}, no directories)"
            )
    for name in gone:
        if name == SCHEMA_FILE:
            raise ResourceError(f"{SCHEMA_FILE} cannot be removed (replace it instead)")
        if name not in active:
            raise ResourceError(f"cannot remove {name!r}: the active set has no such file")
        if name in files:
            raise ResourceError(f"{name!r} is both given and removed")
    sources = {name: text for name, text in active.items() if name not in gone}
    sources.update(files)
    return sources


def file_changes(active: Mapping[str, str], candidate: Mapping[str, str]) -> FileChanges:
    return FileChanges(
        changed=tuple(sorted(n for n in candidate if n in active and candidate[n] != active[n])),
        added=tuple(sorted(n for n in candidate if n not in active)),
        removed=tuple(sorted(n for n in active if n not in candidate)),
    )


def _oversized(sources: Mapping[str, str]) -> list[PolicyProblem]:
    return [
        PolicyProblem(name, 0, f"larger than {MAX_FILE_BYTES} bytes")
        for name, text in sorted(sources.items())
        if len(text.encode()) > MAX_FILE_BYTES
    ]


def _fixtures(
    current: PolicyEngine, candidate: PolicyEngine, supplied: Sequence[SuppliedFixture]
) -> list[FixtureResult]:
    given = {fixture.label: fixture for fixture in supplied}
    results = [
        run_fixture(candidate, path, expected, label)
        for expected, path, label in fixture_files(current.directory)
        if label not in given
    ]
    results += [
        run_fixture_data(candidate, fixture.document, fixture.expected, fixture.label)
        for fixture in given.values()
    ]
    return results


def preview(
    current: PolicyEngine,
    sources: Mapping[str, str],
    supplied: Sequence[SuppliedFixture],
    window: DecisionWindow,
) -> Preview:
    """Check the candidate `sources`, run the fixtures and decide the `window`'s audited
    decisions again; see the module docstring. The current engine is only read. Raises nothing
    for the candidate's content."""
    active = current.active
    active_sources: Mapping[str, str] = active.sources if active is not None else {}
    files = file_changes(active_sources, sources)
    version = content_version(sources)
    problems = _oversized(sources)
    candidate = PolicyEngine(current.directory, entity_cache_size=0, decision_cache_size=0)
    if not problems:
        try:
            candidate.load_sources(sources)
        except PolicyLoadError as err:
            problems = list(err.problems) or [PolicyProblem(SCHEMA_FILE, 0, str(err))]
    if problems:
        return Preview(current.version, version, files, tuple(problems), None, None)
    fixtures = _fixtures(current, candidate, supplied)
    redecision = redecide(current, candidate, window)
    return Preview(current.version, version, files, (), tuple(fixtures), redecision)
