"""The column actions of the Iceberg REST spec's `ReadRestrictions` (apache/iceberg PR #13879:
`required-column-projections`): the column types each applies to (the names themselves are
`catalog.planning.mask_actions`).

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

from cedarberg.catalog.planning.mask_actions import (
    MASK_ALPHANUM,
    MASK_TO_FIXED_VALUE,
    REPLACE_WITH_NULL,
    SHA_256_GLOBAL,
    SHA_256_QUERY_LOCAL,
    SHOW_FIRST_4,
    SHOW_LAST_4,
    TRUNCATE_TO_MONTH,
    TRUNCATE_TO_YEAR,
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
