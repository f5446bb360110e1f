"""The Access page's view of an access review: the document `GET /admin/v1/review` answers
(`review_sources.resource_answer`), arranged for a page, with each determining policy's source
line (`FILE:LINE`, from the policy set the review was made with).

Nothing here decides: every principal, group, condition and finding shown is the endpoint's, so
the page and the API cannot disagree. What is added is presentation only: policy locations and
one line per restriction (`restrictions.summary`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from cedarberg.gateway.authz.engine import PolicyEngine
from cedarberg.gateway.authz.restrictions import summary


def policy_locations(engine: PolicyEngine, version: str) -> Mapping[str, str]:
    """Policy id -> `FILE:LINE` of the active set, if it is still the set of `version` (a reload
    between the review and now leaves the locations out rather than pointing at other lines)."""
    active = engine.active
    if active is None or active.version != version:
        return {}
    return active.locations


def _policies(ids: Sequence[str], locations: Mapping[str, str]) -> list[dict[str, str | None]]:
    return [{"id": policy_id, "location": locations.get(policy_id)} for policy_id in ids]


def _restrictions(
    described: Sequence[Mapping[str, Any]], locations: Mapping[str, str]
) -> list[dict[str, Any]]:
    return [{"policy": _policies([r["policy_id"]], locations)[0], "summary": summary(r)} for r in described]


def _allowed(entry: Mapping[str, Any], locations: Mapping[str, str]) -> dict[str, Any]:
    return {
        **entry,
        "policies": _policies(entry["policy_ids"], locations),
        "restricted": _restrictions(entry["restrictions"], locations),
    }


def _action(entry: Mapping[str, Any], locations: Mapping[str, str]) -> dict[str, Any]:
    return {
        **entry,
        "principals": [_allowed(p, locations) for p in entry["principals"]],
        "groups": [_allowed(g, locations) for g in entry["groups"]],
    }


def _finding(entry: Mapping[str, Any], locations: Mapping[str, str]) -> dict[str, Any]:
    return {
        **entry,
        "policy": _policies([entry["policy_id"]], locations)[0],
        "lifted": _policies(entry["lifted_by"], locations),
    }


def access_view(document: Mapping[str, Any], engine: PolicyEngine) -> dict[str, Any]:
    """The page's context for one resource review `document`: its actions (principals, groups,
    conditions left, errors), its findings of restrictions that cannot bind, the issuers whose
    subjects cannot be listed, and whether the subjects were cut at their bound."""
    locations = policy_locations(engine, document["version"])
    actions = [_action(a, locations) for a in document["actions"]]
    return {
        "resource": document["resource"],
        "type": document["type"],
        "version": document["version"],
        "decided_with": document["context"],
        "subjects_decided": document["subjects_decided"],
        "truncated": document["truncated"],
        "actions": actions,
        "nobody": [a["action"] for a in actions if not _anyone_allowed(a)],
        "findings": [_finding(f, locations) for f in document["restrictions_not_binding"]],
        "not_enumerated": document["not_enumerated"],
    }


def _anyone_allowed(action: Mapping[str, Any]) -> bool:
    return bool(
        action["everyone"]
        or action["principals"]
        or action["groups"]
        or action["members_of_no_group"]
        or action["conditions"]
        or action["errors"]
    )
