"""Column and row restrictions written as annotations on Cedar permit policies.

A permit that lets a principal plan scans of a table may narrow what those scans return:

    @id("analysts-eu-orders")
    @columns("order_id, region, amount")      // the only columns a scan may select, filter or
                                              // ask statistics for (a struct covers its fields)
    @row_filter("region = 'eu'")              // ANDed into every scan the permit allows
    @mask("customer: show-first-4")           // readers see this column only masked
    permit (principal in Cedarberg::Group::"analysts",
            action in [Cedarberg::Action::"loadTable", Cedarberg::Action::"planTableScan"],
            resource == Cedarberg::Table::"default/sales/orders");

Cedar itself ignores annotations, so the decision stays "may this principal plan a scan here?";
the gateway then reads the annotations of the permits that allowed it (the determining policies).
Permits add up, as everywhere in Cedar: a request is allowed if any one satisfied permit covers it,
so a single unrestricted permit (a grant, the admins' permit) lifts every restriction. Each
satisfied permit is one way to scan (`ScanRule`); the catalog picks the ones covering the request.

Restrictions are checked when the policy set loads, so a typo is a refused set, not an open table:
only permits may carry them, the permit must be able to allow `planTableScan`, `columns` must name
at least one column, `row_filter` must parse as an Iceberg row filter (pyiceberg's syntax, the
one `table.scan(row_filter=...)` takes), and `mask` must pair columns the permit lets through with
the Iceberg REST spec's read-restriction actions (`MASK_ACTIONS`). Whether the columns exist is
known only per table, at scan time; a row filter naming a column the table lacks refuses the scan,
and a mask naming one refuses the load (fail closed).

A principal allowed only through restricted permits gets no vended credentials and no signed
requests for that table: the files hold every row and column, so only planned scans can honour the
restriction, unless Cedar trusts its client to enforce it (`readRestrictedData`,
`gateway.web.file_access`). loadTable tells such a principal its restrictions in the spec's
`read-restrictions` form (`catalog.planning.read_restrictions`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from cedarberg.catalog.planning.fields import covered
from cedarberg.catalog.planning.mask_actions import MASK_ACTIONS
from cedarberg.gateway.authz import row_filter_syntax

if TYPE_CHECKING:
    from pyiceberg.expressions import BooleanExpression

COLUMNS = "columns"
ROW_FILTER = "row_filter"
MASK = "mask"
ANNOTATIONS = (COLUMNS, ROW_FILTER, MASK)

# The action restrictions govern, and the groups that contain it.
_PLAN_ACTIONS = frozenset({"planTableScan", "read"})
_MAX_ANNOTATION_CHARS = 16 * 1024


@dataclass(frozen=True, slots=True)
class ScanRule:
    """What one permit allows a scan to touch: columns (None: all) and rows (None: all)."""

    policy_id: str
    columns: frozenset[str] | None
    row_filter: str | None  # as written, for messages and the audit log
    expression: BooleanExpression | None  # parsed, unbound
    masks: tuple[tuple[str, str], ...] = ()  # (column, spec action), sorted by column

    @property
    def restricted(self) -> bool:
        return self.columns is not None or self.expression is not None or bool(self.masks)


UNRESTRICTED = ScanRule("", None, None, None)


def parse_restriction(policy_id: str, policy: Mapping[str, Any]) -> ScanRule | None:
    """The restriction a policy (Cedar JSON form) carries, or None. Raises ValueError saying why
    the annotations cannot be used."""
    annotations: Mapping[str, Any] = policy.get("annotations") or {}
    present = [name for name in ANNOTATIONS if name in annotations]
    if not present:
        return None
    if policy.get("effect") != "permit":
        raise ValueError(f"@{present[0]} narrows a permit; a forbid policy cannot carry it")
    if not _may_allow_planning(policy.get("action") or {}):
        raise ValueError(f"@{present[0]} restricts scan planning, but this permit cannot allow planTableScan")
    columns = _columns(annotations[COLUMNS]) if COLUMNS in annotations else None
    row_filter: str | None = None
    expression: BooleanExpression | None = None
    if ROW_FILTER in annotations:
        row_filter = str(annotations[ROW_FILTER]).strip()
        expression = _row_filter(row_filter)
    masks = parse_masks(annotations[MASK], columns) if MASK in annotations else ()
    return ScanRule(policy_id, columns, row_filter, expression, masks)


def parse_masks(value: object, columns: frozenset[str] | None) -> tuple[tuple[str, str], ...]:
    """`@mask("ssn: show-last-4, email: mask-alphanum")` as sorted (column, action) pairs.

    A mask narrows a column the permit lets through (one `@columns` covers, or any column when
    the permit has no `@columns`): masking a column the permit hides would say nothing. No column
    may be masked twice, nor a field inside a masked one (the spec defines no combination)."""
    text = str(value)
    if len(text) > _MAX_ANNOTATION_CHARS:
        raise ValueError(f"@{MASK} is longer than {_MAX_ANNOTATION_CHARS} characters")
    masks: dict[str, str] = {}
    for entry in text.split(","):
        column, colon, action = (part.strip() for part in entry.partition(":"))
        if not colon or not column or not action:
            raise ValueError(f'@{MASK} entries are "column: action", comma-separated; got {entry.strip()!r}')
        if action not in MASK_ACTIONS:
            raise ValueError(
                f"@{MASK} action {action!r} for {column} is not one of: {', '.join(MASK_ACTIONS)}"
            )
        if column in masks:
            raise ValueError(f"@{MASK} names {column} twice")
        if columns is not None and not covered(column, columns):
            raise ValueError(
                f"@{MASK} masks {column}, which @{COLUMNS} does not let through "
                "(a masked column must be one the permit allows)"
            )
        masks[column] = action
    for column in masks:
        if any(covered(column, frozenset({other})) for other in masks if other != column):
            raise ValueError(f"@{MASK} masks {column} inside another masked column")
    return tuple(sorted(masks.items()))


def _columns(value: object) -> frozenset[str]:
    text = str(value)
    if len(text) > _MAX_ANNOTATION_CHARS:
        raise ValueError(f"@{COLUMNS} is longer than {_MAX_ANNOTATION_CHARS} characters")
    names = [name.strip() for name in text.split(",")]
    if not any(names):
        raise ValueError(f"@{COLUMNS} must name at least one column (comma-separated)")
    if not all(names):
        raise ValueError(f"@{COLUMNS} has an empty column name: {text!r}")
    return frozenset(names)


def _row_filter(text: str) -> BooleanExpression:
    if not text:
        raise ValueError(f"@{ROW_FILTER} is empty")
    if len(text) > _MAX_ANNOTATION_CHARS:
        raise ValueError(f"@{ROW_FILTER} is longer than {_MAX_ANNOTATION_CHARS} characters")
    # Imported here, not with the module: pyiceberg's parser (pyparsing builds its grammar at
    # import) costs more than the rest of validating a policy set, and only a permit carrying a
    # @row_filter needs it. Policy loads are rare and never on a request's path.
    from pyiceberg.expressions.parser import parse as parse_row_filter

    try:
        return parse_row_filter(text)
    except Exception as err:  # pyparsing's ParseException, or ValueError from a bad literal
        # Where and what was expected, not pyparsing's grammar dump (`row_filter_syntax`); a
        # well-shaped filter refused for its values keeps pyiceberg's own first line.
        raise ValueError(
            f"@{ROW_FILTER} is not a valid Iceberg row filter: {row_filter_syntax.explain(text, err)}"
        ) from None


def _may_allow_planning(action: Mapping[str, Any]) -> bool:
    """Whether a policy's action scope can include planTableScan (directly or via `read`)."""
    op = action.get("op")
    if op == "All":
        return True
    if op == "==":
        return _action_id(action.get("entity")) in _PLAN_ACTIONS
    if op == "in":
        entities = action.get("entities")
        if entities is None:
            entities = [action.get("entity")]
        return any(_action_id(entity) in _PLAN_ACTIONS for entity in entities)
    return False


def _action_id(entity: object) -> str:
    return str(entity.get("id", "")) if isinstance(entity, Mapping) else ""


def rules_of(policy_ids: tuple[str, ...], restrictions: Mapping[str, ScanRule]) -> tuple[ScanRule, ...]:
    """The ways to scan that the determining permits of an Allow give: one per permit, and just
    `UNRESTRICTED` as soon as one permit carries no restriction (permits add up). No permit at
    all gives no way to scan (fail closed; an Allow always names one)."""
    rules = []
    for policy_id in policy_ids:
        rule = restrictions.get(policy_id)
        if rule is None:
            return (UNRESTRICTED,)
        rules.append(rule)
    return tuple(rules)


def describe(rules: tuple[ScanRule, ...]) -> list[dict[str, Any]]:
    """The restrictions in `rules` as JSON-able dicts, for explanations (none when unrestricted)."""
    return [
        {
            "policy_id": rule.policy_id,
            "columns": sorted(rule.columns) if rule.columns is not None else None,
            "row_filter": rule.row_filter,
            "masks": dict(rule.masks),
        }
        for rule in rules
        if rule.restricted
    ]


def summary(described: Mapping[str, Any]) -> str:
    """One `describe` entry for people: "columns a, b; rows region = 'eu'; masks ssn: show-last-4"."""
    columns = ", ".join(described["columns"]) if described.get("columns") is not None else "all"
    rows = described.get("row_filter") or "all"
    masks = ", ".join(f"{column}: {action}" for column, action in (described.get("masks") or {}).items())
    return f"columns {columns}; rows {rows}; masks {masks or 'none'}"
