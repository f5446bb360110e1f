"""Request documents of the Iceberg REST spec, parsed and validated once.

Table updates and requirements reuse pyiceberg's tagged models (`action` / `type`
discriminators), so an unknown action or requirement type is a validation error, not a surprise
later. `parse` turns any validation failure into InvalidRequestError with a short, safe message.
"""

from __future__ import annotations

import logging
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator
from pyiceberg.exceptions import ValidationError as IcebergValidationError
from pyiceberg.partitioning import PartitionSpec
from pyiceberg.schema import Schema
from pyiceberg.table.sorting import SortOrder
from pyiceberg.table.update import TableRequirement, TableUpdate
from pyiceberg.view.metadata import ViewVersion

from cedarberg.catalog import wire
from cedarberg.catalog.errors import InvalidRequestError
from cedarberg.catalog.identifiers import Identifier

M = TypeVar("M", bound=BaseModel)
log = logging.getLogger(__name__)


class _Request(BaseModel):
    model_config = ConfigDict(populate_by_name=True, frozen=True, extra="ignore")


class CreateNamespaceRequest(_Request):
    namespace: list[str]
    properties: dict[str, str] = Field(default_factory=dict)


class UpdateNamespacePropertiesRequest(_Request):
    removals: list[str] = Field(default_factory=list)
    updates: dict[str, str] = Field(default_factory=dict)


class TableIdentifierModel(_Request):
    namespace: list[str]
    name: str

    def identifier(self) -> Identifier:
        """The validated identifier. Raises InvalidRequestError for an invalid name."""
        return Identifier.of(self.namespace, self.name)


class NamedRequest(_Request):
    """A create or register request: it names the object it brings into being."""

    name: str


class CreateTableRequest(NamedRequest):
    @model_validator(mode="before")
    @classmethod
    def _strict_wire(cls, data: Any) -> Any:
        if isinstance(data, dict):
            wire.check_struct(data.get("schema"))
            wire.check_optional_bool(data, "stage-create")
            wire.check_transforms(data.get("partition-spec"), "partition-spec")
            wire.check_transforms(data.get("write-order"), "write-order")
        return data

    location: str | None = None
    table_schema: Schema = Field(alias="schema")
    partition_spec: PartitionSpec | None = Field(None, alias="partition-spec")
    write_order: SortOrder | None = Field(None, alias="write-order")
    stage_create: bool = Field(False, alias="stage-create")
    properties: dict[str, str] = Field(default_factory=dict)


class RegisterTableRequest(NamedRequest):
    @model_validator(mode="before")
    @classmethod
    def _strict_wire(cls, data: Any) -> Any:
        if isinstance(data, dict):
            wire.check_optional_bool(data, "overwrite")
        return data

    metadata_location: str = Field(alias="metadata-location")
    overwrite: bool = False


class _StrictUpdates(_Request):
    @model_validator(mode="before")
    @classmethod
    def _strict_wire(cls, data: Any) -> Any:
        if isinstance(data, dict):
            wire.check_updates(data.get("updates"))
        return data


class CommitTableRequest(_StrictUpdates):
    identifier: TableIdentifierModel | None = None
    requirements: tuple[TableRequirement, ...] = ()
    updates: tuple[TableUpdate, ...] = ()


class CommitTransactionRequest(_Request):
    table_changes: list[CommitTableRequest] = Field(alias="table-changes", min_length=1, max_length=100)

    def changes_by_table(self) -> list[tuple[Identifier, CommitTableRequest]]:
        """Every change with the table it names. Raises InvalidRequestError for a change without
        an identifier (in a transaction the body is the only place that names the table)."""
        named = []
        for change in self.table_changes:
            if change.identifier is None:
                raise InvalidRequestError("every table change in a transaction needs an identifier")
            named.append((change.identifier.identifier(), change))
        return named


class RenameRequest(_Request):
    source: TableIdentifierModel
    destination: TableIdentifierModel


class CreateViewRequest(NamedRequest):
    @model_validator(mode="before")
    @classmethod
    def _strict_wire(cls, data: Any) -> Any:
        if isinstance(data, dict):
            wire.check_struct(data.get("schema"))
        return data

    location: str | None = None
    view_schema: Schema = Field(alias="schema")
    view_version: ViewVersion = Field(alias="view-version")
    properties: dict[str, str] = Field(default_factory=dict)


class RegisterViewRequest(NamedRequest):
    metadata_location: str = Field(alias="metadata-location")


# View updates: pyiceberg has no server-side view update models, so they are defined here.
class _ViewUpdate(_Request):
    pass


class AssignViewUUID(_ViewUpdate):
    action: Literal["assign-uuid"]
    uuid: str


class UpgradeViewFormatVersion(_ViewUpdate):
    action: Literal["upgrade-format-version"]
    format_version: int = Field(alias="format-version")


class AddViewSchema(_ViewUpdate):
    action: Literal["add-schema"]
    view_schema: Schema = Field(alias="schema")
    last_column_id: int | None = Field(None, alias="last-column-id")


class SetViewLocation(_ViewUpdate):
    action: Literal["set-location"]
    location: str


class SetViewProperties(_ViewUpdate):
    action: Literal["set-properties"]
    updates: dict[str, str]


class RemoveViewProperties(_ViewUpdate):
    action: Literal["remove-properties"]
    removals: list[str]


class AddViewVersion(_ViewUpdate):
    action: Literal["add-view-version"]
    view_version: ViewVersion = Field(alias="view-version")


class SetCurrentViewVersion(_ViewUpdate):
    action: Literal["set-current-view-version"]
    view_version_id: int = Field(alias="view-version-id")


ViewUpdate = Annotated[
    AssignViewUUID
    | UpgradeViewFormatVersion
    | AddViewSchema
    | SetViewLocation
    | SetViewProperties
    | RemoveViewProperties
    | AddViewVersion
    | SetCurrentViewVersion,
    Field(discriminator="action"),
]


class AssertViewUUID(_Request):
    type: Literal["assert-view-uuid"]
    uuid: str


class CommitViewRequest(_StrictUpdates):
    identifier: TableIdentifierModel | None = None
    requirements: tuple[Annotated[AssertViewUUID, Field(discriminator="type")], ...] = ()
    updates: tuple[ViewUpdate, ...] = ()


# Bounds on one metrics report. Real reports are far smaller: a Spark or pyiceberg scan report of
# a table with hundreds of columns and a filter of dozens of predicates is a few KiB.
MAX_REPORT_BYTES = 64 * 1024
MAX_REPORT_DEPTH = 64  # a left-deep AND of many predicates nests one level per predicate
MAX_REPORT_VALUES = 8192


class MetricsReport(_Request):
    """A ScanReport or CommitReport. Only the spec's fields are kept (any other field a client
    sends is dropped, never stored); nesting and the number of values are bounded here, the size
    by the route (`MAX_REPORT_BYTES`)."""

    @model_validator(mode="before")
    @classmethod
    def _bounded(cls, data: Any) -> Any:
        wire.check_bounded(data, "metrics report", MAX_REPORT_DEPTH, MAX_REPORT_VALUES)
        return data

    report_type: Literal["scan-report", "commit-report"] = Field(alias="report-type")
    table_name: str = Field(alias="table-name")
    snapshot_id: int = Field(alias="snapshot-id")
    filter: Any = None  # an Expression (scan reports): JSON of any shape, bounded as a whole
    schema_id: int | None = Field(None, alias="schema-id")
    projected_field_ids: list[int] | None = Field(None, alias="projected-field-ids")
    projected_field_names: list[str] | None = Field(None, alias="projected-field-names")
    sequence_number: int | None = Field(None, alias="sequence-number")
    operation: str | None = None
    metrics: dict[str, dict[str, int | str]] | None = None  # CounterResult / TimerResult by name
    metadata: dict[str, str] | None = None


def parse(model: type[M], data: Any) -> M:
    """Validate a decoded JSON document. Raises InvalidRequestError naming the first problem, for
    whatever the document makes the models raise: validation is pure (no I/O, no state), so any
    exception it ends with was caused by the document and is the client's error, never a 500."""
    try:
        return model.model_validate(data)
    except ValidationError as err:
        first = err.errors()[0]
        message = str(first["msg"]).removeprefix("Value error, ")
        where = ".".join(str(part) for part in first["loc"])
        if len(where) > _MAX_WHERE:
            where = "..." + where[-_MAX_WHERE:]  # the innermost part says what is wrong
        raise InvalidRequestError(
            _bounded(f"invalid request: {where}: {message}" if where else f"invalid request: {message}")
        ) from None
    except IcebergValidationError as err:
        # pyiceberg's own (a type, transform or spec it cannot read: decimal(99,2), fixed[-1],
        # bucket[-3]); not a ValueError, so pydantic does not wrap it. Its text names the format.
        raise InvalidRequestError(f"invalid request: {_first_line(err)}") from None
    except RecursionError:
        # Bodies are bounded in depth before they are parsed (`catalog.json_nesting`); this keeps
        # a document built in process, or a lower stack, from becoming a 500.
        raise InvalidRequestError("invalid request: the document is nested too deeply") from None
    except (ValueError, TypeError, ArithmeticError, NotImplementedError) as err:
        # pydantic wraps a validator's ValueError, but not what else pyiceberg's validators may
        # raise for a value they cannot decode (TypeError, decimal.InvalidOperation, ...).
        raise InvalidRequestError(f"invalid request: {_first_line(err)}") from None
    except KeyError as err:
        # pyiceberg's "before" validators read fields they assume are there (set-statistics reads
        # its "statistics" before the field's own check can report it missing).
        raise InvalidRequestError(_bounded(f"invalid request: missing field {err.args[0]!r}")) from None
    except (LookupError, AttributeError):
        # ... and assume an object where the document may hold another JSON type (a sort field
        # that is a list).
        raise InvalidRequestError(
            "invalid request: a value is not of the JSON type its field requires"
        ) from None
    except Exception as err:
        # Whatever else a model raises is still the document's fault; the class is logged (not
        # the text, which may quote the document) so that a validator's new failure is seen.
        log.warning("request document refused by an unexpected %s", type(err).__name__)
        raise InvalidRequestError("invalid request: the document cannot be read") from None


# What an error message quotes of the document is bounded: the answer (and any log of it) stays
# small whatever the client sent.
_MAX_WHERE = 120
_MAX_MESSAGE = 400


def _bounded(message: str) -> str:
    return message if len(message) <= _MAX_MESSAGE else message[:_MAX_MESSAGE] + "..."


def _first_line(err: Exception) -> str:
    text = str(err).strip()
    return text.splitlines()[0][:200] if text else "malformed document"
