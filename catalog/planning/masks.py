"""The column actions of the Iceberg REST spec's `ReadRestrictions` (apache/iceberg PR #13879:
`required-column-projections`), and the column types each applies to.

A server must not return an action for a column whose type is outside the action's "Applicable
to" set; `applies` is that check, for every type a column has had (a promoted column keeps its
field id, so one projection covers every schema the table has had).
"""

from __future__ import annotations

from pyiceberg.types import (
    BinaryType,
    BooleanType,
    DateType,
    DecimalType,
    DoubleType,
    FixedType,
    FloatType,
    IcebergType,
    IntegerType,
    ListType,
    LongType,
    MapType,
    StringType,
    StructType,
    TimestampNanoType,
    TimestampType,
    TimestamptzNanoType,
    TimestamptzType,
    TimeType,
    UUIDType,
)

MASK_ALPHANUM = "mask-alphanum"
MASK_TO_FIXED_VALUE = "mask-to-fixed-value"
REPLACE_WITH_NULL = "replace-with-null"
SHOW_FIRST_4 = "show-first-4"
SHOW_LAST_4 = "show-last-4"
TRUNCATE_TO_YEAR = "truncate-to-year"
TRUNCATE_TO_MONTH = "truncate-to-month"
SHA_256_GLOBAL = "sha-256-global"
SHA_256_QUERY_LOCAL = "sha-256-query-local"

MASK_ACTIONS = (
    MASK_ALPHANUM,
    MASK_TO_FIXED_VALUE,
    REPLACE_WITH_NULL,
    SHOW_FIRST_4,
    SHOW_LAST_4,
    TRUNCATE_TO_YEAR,
    TRUNCATE_TO_MONTH,
    SHA_256_GLOBAL,
    SHA_256_QUERY_LOCAL,
)

_STRINGS: tuple[type[IcebergType], ...] = (StringType,)
_DATES: tuple[type[IcebergType], ...] = (
    DateType,
    TimestampType,
    TimestamptzType,
    TimestampNanoType,
    TimestamptzNanoType,
)
_HASHABLE: tuple[type[IcebergType], ...] = (StringType, IntegerType, LongType, BinaryType)
# The types the spec lists a fixed value for (variant is not modelled by pyiceberg 0.12).
_FIXED_VALUE: tuple[type[IcebergType], ...] = (
    BooleanType,
    IntegerType,
    LongType,
    FloatType,
    DoubleType,
    DecimalType,
    StringType,
    DateType,
    TimeType,
    TimestampType,
    TimestamptzType,
    TimestampNanoType,
    TimestamptzNanoType,
    UUIDType,
    FixedType,
    BinaryType,
    ListType,
    MapType,
    StructType,
)
_APPLICABLE = {
    MASK_ALPHANUM: _STRINGS,
    SHOW_FIRST_4: _STRINGS,
    SHOW_LAST_4: _STRINGS,
    TRUNCATE_TO_YEAR: _DATES,
    TRUNCATE_TO_MONTH: _DATES,
    SHA_256_GLOBAL: _HASHABLE,
    SHA_256_QUERY_LOCAL: _HASHABLE,
    MASK_TO_FIXED_VALUE: _FIXED_VALUE,
}


def applies(action: str, field_type: IcebergType, required: bool) -> bool:
    """Whether the spec allows `action` on a column of `field_type` (`required`: not nullable)."""
    if action == REPLACE_WITH_NULL:
        return not required
    return isinstance(field_type, _APPLICABLE.get(action, ()))
