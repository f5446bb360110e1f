"""Residual policies of a partial evaluation, made readable: what a policy still asks of a request.

`cedarpy.is_authorized_partial` with the principal (and the context) left unknown answers, for one
action on one resource, which policies are decided already and which still depend on the unknowns:
for those it returns the policy with everything known substituted and simplified (a *residual*,
Cedar JSON). Cedar's simplification leaves `true && x` and `unknown && false` in place; this module
folds such constants, drops residuals that can never be satisfied, names what each residual still
reads (`principal`, `principal.groups`, `context.auth_method`, ...) and the groups it names, and
renders it as Cedar text in terms of `principal` and `context`.

Folding keeps Cedar's semantics: an identity (`true && x` is `x`; `principal.groups.containsAny([])`
is `false`, a Set attribute being required in the schema) is replaced anywhere; a residual
is dropped as unsatisfiable only when a `when` condition is a conjunction with a literal `false`
(or an `unless` a disjunction with a literal `true`): it then evaluates to false or to an error,
and Cedar skips a policy whose condition errors, so it applies to no request.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import cedarpy
import orjson

GROUP_TYPE = "Cedarberg::Group"
_UNKNOWN_VARS = ("principal", "context")
_SCOPE = re.compile(
    r"^\s*(?:@\w+\([^)]*\)\s*)*(permit|forbid)\s*\(\s*principal\s*,\s*action\s*,\s*resource\s*\)\s*"
)
_MEMBERSHIP = ("contains", "containsAny", "containsAll")

Json = Any


@dataclass(frozen=True, slots=True)
class Residual:
    """One policy that still depends on the unknowns: its id and effect, its condition as Cedar
    text, what of the principal and context it reads, and the groups it names."""

    policy_id: str
    effect: str  # "permit" | "forbid"
    condition: str  # e.g. `when { principal.groups.containsAny(["etl"]) }`; "": every request
    reads: tuple[str, ...]  # "principal" (its identity or membership), "principal.groups", "context.refs"
    groups: frozenset[str]

    @property
    def context_dependent(self) -> bool:
        return any(item.startswith("context") for item in self.reads)

    def to_json(self, location: str | None) -> dict[str, Any]:
        return {
            "policy_id": self.policy_id,
            "effect": self.effect,
            "location": location,
            "condition": self.condition,
            "reads": list(self.reads),
            "context_dependent": self.context_dependent,
        }


def residuals_of(result: cedarpy.PartialAuthzResult) -> list[Residual]:
    """The residuals of a partial evaluation that may still apply, by policy id."""
    found = []
    for policy_id, policy in sorted(result.residuals.items()):
        conditions = [_folded_condition(c) for c in policy.get("conditions") or ()]
        if any(_never_satisfied(c) for c in conditions):
            continue
        # Folded to no condition at all, it applies to every request (condition "").
        conditions = [c for c in conditions if not _always_satisfied(c)]
        reads: set[str] = set()
        groups: set[str] = set()
        for condition in conditions:
            _walk(condition["body"], reads, groups)
        found.append(
            Residual(
                policy_id=str(policy_id),
                effect=str(policy.get("effect")),
                condition=_render(str(policy.get("effect")), conditions),
                reads=tuple(sorted(reads)),
                groups=frozenset(groups),
            )
        )
    return found


# -- folding --------------------------------------------------------------------------------------


def _folded_condition(condition: Mapping[str, Json]) -> dict[str, Json]:
    return {"kind": condition.get("kind", "when"), "body": _fold(_known_vars(condition.get("body")))}


def _known_vars(expr: Json) -> Json:
    """`unknown("principal")` written as the variable `principal` (and so for the context)."""
    if isinstance(expr, dict):
        unknown = expr.get("unknown")
        if isinstance(unknown, list) and len(unknown) == 1 and isinstance(unknown[0], dict):
            name = unknown[0].get("Value")
            if name in _UNKNOWN_VARS:
                return {"Var": name}
        return {key: _known_vars(value) for key, value in expr.items()}
    if isinstance(expr, list):
        return [_known_vars(item) for item in expr]
    return expr


def _literal(expr: Json) -> bool | None:
    if isinstance(expr, dict) and set(expr) == {"Value"} and isinstance(expr["Value"], bool):
        return bool(expr["Value"])
    return None


def _fold(expr: Json) -> Json:
    """Replace Boolean identities bottom-up (exact: the result evaluates, or errs, as `expr` does)."""
    if isinstance(expr, list):
        return [_fold(item) for item in expr]
    if not isinstance(expr, dict):
        return expr
    expr = {key: _fold(value) for key, value in expr.items()}
    for op, unit in (("&&", True), ("||", False)):
        node = expr.get(op)
        if isinstance(node, dict) and len(expr) == 1:
            left, right = _literal(node.get("left")), _literal(node.get("right"))
            if left is unit:
                return node["right"]  # true && x == x;  false || x == x
            if left is not None:
                return {"Value": left}  # false && x == false;  true || x == true (x not evaluated)
            if right is unit:
                return node["left"]  # x && true == x (a Boolean x, as the validator guarantees)
    for op, empty in (("containsAny", False), ("containsAll", True)):
        node = expr.get(op)
        if (
            isinstance(node, dict)
            and len(expr) == 1
            and _attribute(node.get("left"))
            and _empty(node.get("right"))
        ):
            return {"Value": empty}  # a set attribute contains none of [] and all of []
    node = expr.get("!")
    if isinstance(node, dict) and len(expr) == 1:
        value = _literal(node.get("arg"))
        if value is not None:
            return {"Value": not value}
    return expr


def _attribute(expr: Json) -> bool:
    """`principal.x` or `context.x`: in this schema every Set-valued attribute of the principal
    and the context is required, so reading one never errs."""
    node = expr.get(".") if isinstance(expr, dict) and len(expr) == 1 else None
    return isinstance(node, dict) and _var(node.get("left")) is not None


def _empty(expr: Json) -> bool:
    return isinstance(expr, dict) and (expr.get("Set") == [] or expr.get("Value") == [])


def _top(expr: Json, op: str) -> Iterator[Json]:
    node = expr.get(op) if isinstance(expr, dict) and len(expr) == 1 else None
    if isinstance(node, dict):
        yield from _top(node.get("left"), op)
        yield from _top(node.get("right"), op)
    else:
        yield expr


def _never_satisfied(condition: Mapping[str, Json]) -> bool:
    """A `when` that is false (or errs) whatever the unknowns are; an `unless` that is true."""
    if condition["kind"] == "when":
        return any(_literal(part) is False for part in _top(condition["body"], "&&"))
    return any(_literal(part) is True for part in _top(condition["body"], "||"))


def _always_satisfied(condition: Mapping[str, Json]) -> bool:
    return _literal(condition["body"]) is (condition["kind"] == "when")


# -- reading --------------------------------------------------------------------------------------


def _var(expr: Json) -> str | None:
    if isinstance(expr, dict) and set(expr) == {"Var"}:
        return str(expr["Var"])
    return None


def _walk(expr: Json, reads: set[str], groups: set[str]) -> None:
    """Collect what `expr` reads of the principal and context, and the groups it names."""
    if isinstance(expr, list):
        for item in expr:
            _walk(item, reads, groups)
        return
    if not isinstance(expr, dict):
        return
    for op in (".", "has"):
        node = expr.get(op)
        if isinstance(node, dict) and (var := _var(node.get("left"))) is not None and len(expr) == 1:
            reads.add(f"{var}.{node.get('attr')}")
            return
    var = _var(expr)
    if var is not None:
        reads.add(var)
        return
    entity = expr.get("Value")
    uid = entity.get("__entity") if isinstance(entity, dict) else None
    if isinstance(uid, dict) and uid.get("type") == GROUP_TYPE:
        groups.add(str(uid.get("id")))
    for op in _MEMBERSHIP:  # principal.groups.containsAny(["a", "b"]) names groups a and b
        node = expr.get(op)
        if isinstance(node, dict) and _reads_groups(node.get("left")):
            groups.update(_strings(node.get("right")))
    for value in expr.values():
        _walk(value, reads, groups)


def _reads_groups(expr: Json) -> bool:
    node = expr.get(".") if isinstance(expr, dict) else None
    return isinstance(node, dict) and _var(node.get("left")) == "principal" and node.get("attr") == "groups"


def _strings(expr: Json) -> Iterator[str]:
    if isinstance(expr, dict):
        if isinstance(expr.get("Value"), str):
            yield expr["Value"]
        elif isinstance(expr.get("Value"), list):
            yield from (item for item in expr["Value"] if isinstance(item, str))
        elif isinstance(expr.get("Set"), list):
            for item in expr["Set"]:
                yield from _strings(item)


# -- rendering ------------------------------------------------------------------------------------


def _render(effect: str, conditions: list[dict[str, Json]]) -> str:
    """The conditions as Cedar text (`when { ... } unless { ... }`), through Cedar's own printer;
    "" for none."""
    if not conditions:
        return ""
    policy = {
        "effect": effect,
        "principal": {"op": "All"},
        "action": {"op": "All"},
        "resource": {"op": "All"},
        "conditions": conditions,
    }
    document = {"staticPolicies": {"residual": policy}, "templates": {}, "templateLinks": []}
    try:
        text = cedarpy.policies_from_json_str(orjson.dumps(document).decode())
    except ValueError:  # a residual Cedar cannot print: show its JSON rather than nothing
        return orjson.dumps(conditions).decode()
    return " ".join(_SCOPE.sub("", text).strip().rstrip(";").split())
