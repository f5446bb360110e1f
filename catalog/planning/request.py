"""PlanTableScanRequest and FetchScanTasksRequest, strictly parsed (unknown fields are errors)."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ModelWrapValidatorHandler,
    ValidationError,
    field_validator,
    model_validator,
)
from pyiceberg.expressions import AlwaysTrue, BooleanExpression, SerializableBooleanExpression

from cedarberg.catalog.requests import parse

M = TypeVar("M", bound=BaseModel)

_MAX_NAMES = 10_000  # select / stats-fields entries: far above any real table's column count
# Nesting of and/or/not. pyiceberg's expression parser spends about seven Python frames per level
# and exhausts the stack near 140; the body's depth bound (the gateway's `max_body_depth`, at
# most 100) refuses deeper filters first, this keeps any other caller of the parser as safe.
_MAX_FILTER_DEPTH = 100

_COMBINING = {"and": ("left", "right"), "or": ("left", "right"), "not": ("child",)}
_UNARY = frozenset({"is-null", "not-null", "is-nan", "not-nan"})
_LITERAL = frozenset({"lt", "lt-eq", "gt", "gt-eq", "eq", "not-eq", "starts-with", "not-starts-with"})
_SET = frozenset({"in", "not-in"})
_CONSTANT = {"true": True, "false": False}


def _is_primitive_value(value: Any) -> bool:
    return isinstance(value, bool | int | float | str)


def _expression(node: Any, where: str, depth: int) -> Any:
    """A filter expression of the spec, checked against its shapes (so that a refusal names what
    is wrong, never pyiceberg's internals) and with the spec's TrueExpression / FalseExpression
    (`{"type": "true"}`, `{"type": "false"}`), which pyiceberg's parser does not know, turned into
    the booleans it reads as AlwaysTrue / AlwaysFalse."""
    at = f"{where}: " if where else ""
    if depth > _MAX_FILTER_DEPTH:
        raise ValueError(f"{at}nested deeper than {_MAX_FILTER_DEPTH} levels")
    if isinstance(node, bool):
        return node
    if not isinstance(node, dict) or not isinstance(node.get("type"), str):
        raise ValueError(f"{at}an expression must be an object with a string type")  # noqa: TRY004 - pydantic reports ValueError
    kind = node["type"]
    prefix = f"{where}." if where else ""
    if kind in _CONSTANT:
        return _CONSTANT[kind]
    if kind in _COMBINING:
        children = {}
        for key in _COMBINING[kind]:
            if key not in node:
                raise ValueError(f"{at}the {kind} expression needs {key}")
            children[key] = _expression(node[key], f"{prefix}{key}", depth + 1)
        return {**node, **children}
    if kind not in _UNARY | _LITERAL | _SET:
        raise ValueError(f"{at}unknown expression type {kind[:40]!r}")
    term = node.get("term")
    if isinstance(term, dict) and term.get("type") == "transform":
        raise ValueError(f"{at}transform terms are not supported in scan filters")
    if not isinstance(term, str) or not term:
        raise ValueError(f"{at}the {kind} expression needs a term naming a column")
    if kind in _LITERAL and ("value" not in node or not _is_primitive_value(node["value"])):
        raise ValueError(f"{at}the {kind} expression needs a value (a boolean, number or string)")
    if kind in _SET:
        values = node.get("values")
        if not isinstance(values, list) or not all(_is_primitive_value(v) for v in values):
            raise ValueError(
                f"{at}the {kind} expression needs values (a list of booleans, numbers or strings)"
            )
    return node


class PlanScanRequest(BaseModel):
    model_config = ConfigDict(populate_by_name=True, frozen=True, extra="forbid")

    snapshot_id: int | None = Field(None, alias="snapshot-id")
    # Not in the spec (whose clients resolve refs themselves): scan the snapshot a branch or tag
    # names, for HTTP clients that would otherwise load the table first to resolve it.
    ref: str | None = Field(None, min_length=1, max_length=256)
    select: list[str] | None = Field(None, max_length=_MAX_NAMES)
    filter: SerializableBooleanExpression | None = None
    case_sensitive: bool = Field(True, alias="case-sensitive", strict=True)
    use_snapshot_schema: bool = Field(False, alias="use-snapshot-schema", strict=True)
    start_snapshot_id: int | None = Field(None, alias="start-snapshot-id")
    end_snapshot_id: int | None = Field(None, alias="end-snapshot-id")
    stats_fields: list[str] | None = Field(None, alias="stats-fields", max_length=_MAX_NAMES)
    min_rows_requested: int | None = Field(None, alias="min-rows-requested", ge=0)  # accepted, unused

    @model_validator(mode="wrap")
    @classmethod
    def _expression_failures_are_invalid(cls, data: Any, handler: ModelWrapValidatorHandler[Any]) -> Any:
        """Whatever pyiceberg's expression parsing raises past the shape checks below (TypeError,
        its ValidationError, RecursionError, ...) is a validation error without its internals,
        so that the one `catalog.requests.parse` answers it with a 400."""
        try:
            return handler(data)
        except ValidationError:
            raise
        except Exception:
            raise ValueError("filter: not a valid expression") from None

    @field_validator("filter", mode="before")
    @classmethod
    def _spec_expression(cls, value: Any) -> Any:
        return None if value is None else _expression(value, "", 1)

    @model_validator(mode="after")
    def _one_kind_of_scan(self) -> PlanScanRequest:
        incremental = self.start_snapshot_id is not None or self.end_snapshot_id is not None
        if incremental and self.snapshot_id is not None:
            raise ValueError("snapshot-id cannot be combined with start-snapshot-id/end-snapshot-id")
        if self.ref is not None and (incremental or self.snapshot_id is not None):
            raise ValueError("ref cannot be combined with snapshot-id or start-snapshot-id/end-snapshot-id")
        if (self.start_snapshot_id is None) != (self.end_snapshot_id is None):
            raise ValueError("an incremental scan needs both start-snapshot-id and end-snapshot-id")
        return self

    @property
    def incremental(self) -> bool:
        return self.start_snapshot_id is not None

    @property
    def row_filter(self) -> BooleanExpression:
        return AlwaysTrue() if self.filter is None else self.filter


class FetchScanTasksRequest(BaseModel):
    model_config = ConfigDict(populate_by_name=True, frozen=True, extra="forbid")

    plan_task: str = Field(alias="plan-task", min_length=1, max_length=256)


def parse_request(model: type[M], data: Any) -> M:
    """`catalog.requests.parse` (the pipeline parses these bodies with it before authorizing)."""
    return parse(model, data)
