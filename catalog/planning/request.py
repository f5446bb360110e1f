"""PlanTableScanRequest and FetchScanTasksRequest, strictly parsed (unknown fields are errors)."""

from __future__ import annotations

from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pyiceberg.expressions import AlwaysTrue, BooleanExpression, SerializableBooleanExpression

from cedarberg.catalog.errors import InvalidRequestError
from cedarberg.catalog.requests import parse

M = TypeVar("M", bound=BaseModel)

_MAX_NAMES = 10_000  # select / stats-fields entries: far above any real table's column count


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
    """`catalog.requests.parse`, also for pyiceberg's expression parsing, which raises TypeError
    for some malformed predicates (a comparison without a value)."""
    try:
        return parse(model, data)
    except TypeError as err:
        raise InvalidRequestError(f"invalid request: filter: {str(err).splitlines()[0][:200]}") from None
