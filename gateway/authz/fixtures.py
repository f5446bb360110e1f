"""Request fixtures: `tests/ALLOW/*.json` must be allowed and `tests/DENY/*.json` denied.

As in cedar-examples, a fixture is a plain Cedar request with its entities, so it can be read (and
run with the Cedar CLI) without knowing the gateway:

    {
      "description": "a writer may append to a granted table",
      "principal": "Cedarberg::User::\\"erin\\"",          (or {"type": ..., "id": ...})
      "action": "updateTable",                           (short for Cedarberg::Action::"updateTable")
      "resource": {"type": "Cedarberg::Table", "id": "default/sales/orders"},
      "context": {"update_kinds": ["add-snapshot"]},     (merged over DEFAULT_CONTEXT; for actAs,
                                                          over DELEGATION_DEFAULT_CONTEXT)
      "entities": [ ...Cedar JSON entities... ],
      "determining_policies": ["writers-write-granted"]  (optional: also checked)
    }
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from cedarberg.gateway.authz.engine import Decision, PolicyEngine
from cedarberg.gateway.authz.entities import ACTION_TYPE, EntityUid
from cedarberg.gateway.authz.errors import ResourceError

FIXTURE_DIR = "tests"
EXPECTATIONS = ("ALLOW", "DENY")
DEFAULT_CONTEXT: Mapping[str, Any] = {
    "auth_method": "api-key",
    "client_address": "127.0.0.1",
    "update_kinds": [],
    "refs": [],
    "property_keys": [],
    "creates": False,
}
# `actAs` (an engine acting for a user) has a context of its own (`DelegationContext`).
DELEGATION_DEFAULT_CONTEXT: Mapping[str, Any] = {
    "auth_method": "gateway-token",
    "client_address": "127.0.0.1",
    "subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
    "subject_issuer": "unsigned",
    "refresh": False,
}
_DEFAULT_CONTEXTS: Mapping[str, Mapping[str, Any]] = {"actAs": DELEGATION_DEFAULT_CONTEXT}
_KEYS = {"description", "principal", "action", "resource", "context", "entities", "determining_policies"}
_UID_TEXT = re.compile(r'^\s*(?P<type>[A-Za-z_][\w]*(?:::[A-Za-z_][\w]*)*)::(?P<id>".*")\s*$', re.S)


@dataclass(frozen=True, slots=True)
class FixtureResult:
    path: str  # relative to the policy directory
    expected: str  # ALLOW or DENY
    passed: bool
    message: str
    decision: Decision | None = None


def parse_uid(value: object, *, default_type: str | None = None) -> EntityUid:
    """An entity uid from Cedar text (`T::"id"`), a {"type","id"} object, or a bare action name."""
    if isinstance(value, Mapping) and isinstance(value.get("type"), str) and isinstance(value.get("id"), str):
        return EntityUid(value["type"], value["id"])
    if isinstance(value, str):
        match = _UID_TEXT.match(value)
        if match:
            try:
                id_ = orjson.loads(match.group("id"))
            except orjson.JSONDecodeError:
                id_ = None
            if isinstance(id_, str):
                return EntityUid(match.group("type"), id_)
        elif default_type and re.fullmatch(r"[A-Za-z_]\w*", value):
            return EntityUid(default_type, value)
    raise ResourceError(f"not an entity uid: {value!r}")


def _checked_fixture(data: object) -> dict[str, Any]:
    if not isinstance(data, dict):
        raise ResourceError("a fixture is a JSON object")
    unknown = set(data) - _KEYS
    if unknown:
        raise ResourceError(f"unknown keys: {', '.join(sorted(unknown))}")
    missing = {"principal", "action", "resource"} - set(data)
    if missing:
        raise ResourceError(f"missing keys: {', '.join(sorted(missing))}")
    if not isinstance(data.get("entities", []), list):
        raise ResourceError("entities must be a list")
    if not isinstance(data.get("context", {}), dict):
        raise ResourceError("context must be an object")
    wanted = data.get("determining_policies", [])
    if not isinstance(wanted, list) or not all(isinstance(policy, str) for policy in wanted):
        raise ResourceError("determining_policies must be a list of policy ids")
    return data


def run_fixture(engine: PolicyEngine, path: Path, expected: str, label: str) -> FixtureResult:
    """Run the fixture in the file at `path` (see `run_fixture_data`)."""
    try:
        data: object = orjson.loads(path.read_bytes())
    except (OSError, ValueError) as err:
        return FixtureResult(label, expected, False, f"bad fixture: {err}")
    return run_fixture_data(engine, data, expected, label)


def run_fixture_data(engine: PolicyEngine, data: object, expected: str, label: str) -> FixtureResult:
    """Decide the fixture `data` (a decoded fixture document) with `engine`: it passes if the
    decision is `expected` (ALLOW or DENY) and, where the fixture names them, made by its
    determining policies. A malformed fixture fails with "bad fixture: ..."; nothing raises."""
    try:
        fixture = _checked_fixture(data)
        action = parse_uid(fixture["action"], default_type=ACTION_TYPE)
        context = {**_DEFAULT_CONTEXTS.get(action.id, DEFAULT_CONTEXT), **fixture.get("context", {})}
        entities = fixture.get("entities", [])
        decision = engine.decide_request(
            parse_uid(fixture["principal"]),
            action,
            parse_uid(fixture["resource"]),
            context,
            entities,
        )
    except (ValueError, TypeError, ResourceError) as err:
        return FixtureResult(label, expected, False, f"bad fixture: {err}")
    problems: list[str] = []
    if decision.allowed != (expected == "ALLOW"):
        problems.append(f"expected {expected}, got {'ALLOW' if decision.allowed else 'DENY'}")
    wanted = fixture.get("determining_policies")
    if wanted is not None and sorted(wanted) != sorted(decision.policy_ids):
        problems.append(f"determining policies {sorted(decision.policy_ids)}, expected {sorted(wanted)}")
    notes = [*problems, *(f"error: {e}" for e in decision.errors)]
    return FixtureResult(label, expected, not problems, "; ".join(notes) or "ok", decision)


def fixture_files(directory: Path) -> list[tuple[str, Path, str]]:
    """The fixtures under `directory/tests/{ALLOW,DENY}` in name order: (expected, path, label),
    the label relative to `directory`."""
    found: list[tuple[str, Path, str]] = []
    for expected in EXPECTATIONS:
        folder = directory / FIXTURE_DIR / expected
        for path in sorted(folder.glob("*.json")) if folder.is_dir() else []:
            found.append((expected, path, str(path.relative_to(directory))))
    return found


def run_fixtures(engine: PolicyEngine, directory: Path) -> list[FixtureResult]:
    """Run every fixture under `directory/tests/{ALLOW,DENY}` (in name order) with `engine`."""
    return [run_fixture(engine, path, expected, label) for expected, path, label in fixture_files(directory)]
