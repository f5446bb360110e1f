"""Strict checks of wire JSON where pyiceberg's models would coerce or default.

pyiceberg parses leniently (a missing `required` becomes false, "yes" becomes true, property values
are stringified). A catalog must not guess what a client meant, so request documents are checked
against the spec's required fields and JSON types before they are parsed.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import TypeAdapter
from pyiceberg.conversions import from_json
from pyiceberg.types import IcebergType, PrimitiveType


class WireError(ValueError):
    """The JSON does not have the shape the spec requires."""


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _require(condition: bool, where: str, what: str) -> None:
    if not condition:
        raise WireError(f"{where}: {what}")


def check_type(value: Any, where: str) -> None:
    """A field type: a primitive name, or a struct, list or map object."""
    if isinstance(value, str):
        check_sized_primitive(value, where)
        return
    _require(isinstance(value, dict), where, "type must be a string or an object")
    kind = value.get("type")
    if kind == "struct":
        check_struct(value, where)
    elif kind == "list":
        _require(_is_int(value.get("element-id")), where, "list needs an integer element-id")
        _require(
            isinstance(value.get("element-required"), bool), where, "list needs a boolean element-required"
        )
        check_type(value.get("element"), f"{where}.element")
    elif kind == "map":
        for key in ("key-id", "value-id"):
            _require(_is_int(value.get(key)), where, f"map needs an integer {key}")
        _require(isinstance(value.get("value-required"), bool), where, "map needs a boolean value-required")
        check_type(value.get("key"), f"{where}.key")
        check_type(value.get("value"), f"{where}.value")
    else:
        raise WireError(f"{where}: unknown nested type {kind!r}")


# decimal(P, S) and fixed[L] as Java's `Types.fromPrimitiveString` reads them (any case, spaces
# around the numbers), with its wording for what it refuses.
_DECIMAL = re.compile(r"decimal\(\s*(\d+)\s*,\s*(\d+)\s*\)")
_FIXED = re.compile(r"fixed\[\s*(\d+)\s*\]")
_MAX_DECIMAL_PRECISION = 38
_JAVA_INT_MAX = 2**31 - 1  # lengths and sizes are Java ints in every engine


def check_sized_primitive(name: str, where: str) -> None:
    """A `decimal(...)` or `fixed[...]` type has arguments Iceberg can use: pyiceberg refuses the
    others with its own ValidationError (a 400 too, but in other words than the reference's).
    Other names are left to pyiceberg."""
    lower = name.lower()
    if not lower.startswith(("decimal", "fixed")):
        return
    decimal = _DECIMAL.fullmatch(lower)
    if decimal is not None:
        precision = decimal.group(1).lstrip("0") or "0"
        _require(
            len(precision) <= 2 and int(precision) <= _MAX_DECIMAL_PRECISION,
            where,
            f"Decimals with precision larger than 38 are not supported: {precision[:12]}",
        )
        return
    fixed = _FIXED.fullmatch(lower)
    if fixed is not None:
        length = fixed.group(1).lstrip("0") or "0"
        _require(
            len(length) <= len(str(_JAVA_INT_MAX)) and int(length) <= _JAVA_INT_MAX,
            where,
            f"fixed length {length[:12]} is larger than {_JAVA_INT_MAX}",
        )
        return
    expected = "decimal(P, S)" if lower.startswith("decimal") else "fixed[L]"
    raise WireError(f"{where}: Cannot parse type string to primitive: {name[:64]} (expected {expected})")


def check_struct(value: Any, where: str = "schema") -> None:
    """A struct (or schema): every field has an integer id, a name, a type and a boolean required."""
    _require(isinstance(value, dict) and value.get("type") == "struct", where, "must be a struct object")
    fields = value.get("fields")
    _require(isinstance(fields, list), where, "fields must be a list")
    for index, field in enumerate(fields):
        at = f"{where}.fields.{index}"
        _require(isinstance(field, dict), at, "must be an object")
        _require(_is_int(field.get("id")), at, "id must be an integer")
        _require(isinstance(field.get("name"), str), at, "name must be a string")
        _require(isinstance(field.get("required"), bool), at, "required must be a boolean")
        _require("type" in field, at, "type is required")
        check_type(field["type"], f"{at}.type")
        for key in ("initial-default", "write-default"):
            if field.get(key) is not None:
                check_default(field["type"], field[key], f"{at}.{key}")


_ICEBERG_TYPE: TypeAdapter[IcebergType] = TypeAdapter(IcebergType)
_STRING_ENCODED = ("decimal(", "fixed[", "date", "time", "timestamp", "string", "uuid", "binary")


def check_default(field_type: Any, value: Any, where: str) -> None:
    """A field's `initial-default` / `write-default` has the JSON type the spec's single-value
    serialization gives its field type and decodes as a value of that type (pyiceberg would
    otherwise store "abc" as an int default, or raise TypeError, InvalidOperation or
    NotImplementedError for a value it cannot decode). Defaults of nested types are refused:
    pyiceberg cannot decode them."""
    if not isinstance(field_type, str):
        kind = field_type.get("type") if isinstance(field_type, dict) else field_type
        raise WireError(f"{where}: a default value for a {kind} field is not supported")
    name = field_type.strip().lower()
    if name == "boolean":
        ok = isinstance(value, bool)
    elif name in ("int", "long"):
        ok = _is_int(value)
    elif name in ("float", "double"):
        ok = isinstance(value, int | float) and not isinstance(value, bool)
    else:
        ok = not name.startswith(_STRING_ENCODED) or isinstance(value, str)
    _require(ok, where, f"not a valid default value for type {name}")
    try:
        iceberg_type = _ICEBERG_TYPE.validate_python(field_type)
    except ValueError:  # a type pyiceberg does not model (variant): it cannot decode its defaults
        raise WireError(f"{where}: a default value for a {name} field is not supported") from None
    if not isinstance(iceberg_type, PrimitiveType):
        raise WireError(f"{where}: a default value for a {name} field is not supported")
    try:
        from_json(iceberg_type, value)
    except Exception:  # whatever pyiceberg raises (TypeError, InvalidOperation, ...): no value
        raise WireError(f"{where}: cannot decode the default value as type {name}") from None


def check_optional_bool(document: dict[str, Any], key: str) -> None:
    if key in document:
        _require(isinstance(document[key], bool), key, "must be a boolean")


def check_string_map(value: Any, where: str) -> None:
    _require(isinstance(value, dict), where, "must be an object")
    for key, item in value.items():
        _require(isinstance(item, str), f"{where}.{key}", "must be a string")


def check_updates(updates: Any) -> None:
    """Strict shapes of the table and view updates that pyiceberg would coerce."""
    if not isinstance(updates, list):
        return  # the model reports the wrong type
    for index, update in enumerate(updates):
        if not isinstance(update, dict):
            continue
        at = f"updates.{index}"
        action = update.get("action")
        if action == "set-properties":
            check_string_map(update.get("updates"), f"{at}.updates")
        elif action == "remove-properties":
            removals = update.get("removals")
            _require(
                isinstance(removals, list) and all(isinstance(r, str) for r in removals),
                at,
                "removals must be a list of strings",
            )
        elif action == "add-schema":
            check_struct(update.get("schema"), f"{at}.schema")
        elif action == "add-spec":
            check_transforms(update.get("spec"), f"{at}.spec")
        elif action == "add-sort-order":
            check_transforms(update.get("sort-order"), f"{at}.sort-order")


# bucket[N] and truncate[N] as Java's `Transforms.fromString` reads them: N a Java int, > 0.
_SIZED_TRANSFORM = re.compile(r"(bucket|truncate)\[(\d+)\]")
_SIZE_ERRORS = {
    "bucket": "Invalid number of buckets: {} (must be > 0)",
    "truncate": "Invalid truncate width: {} (must be > 0)",
}


def check_transforms(spec_or_order: Any, where: str) -> None:
    """The bucket and truncate transforms of a partition spec or sort order have a size that
    Iceberg can use (1 to 2^31 - 1; Java's wording for 0). pyiceberg would accept bucket[0]
    (a division by zero when a value is bucketed) and a size no engine can read. Malformed
    names are left to pyiceberg (its ValidationError names the format); unknown names are
    Iceberg's UnknownTransform, kept for forward compatibility."""
    if not isinstance(spec_or_order, dict) or not isinstance(spec_or_order.get("fields"), list):
        return  # the model reports the wrong shape
    for index, field in enumerate(spec_or_order["fields"]):
        transform = field.get("transform") if isinstance(field, dict) else None
        sized = _SIZED_TRANSFORM.fullmatch(transform) if isinstance(transform, str) else None
        if sized is None:
            continue
        name, digits = sized.group(1), sized.group(2).lstrip("0") or "0"
        at = f"{where}.fields.{index}"
        _require(digits != "0", at, _SIZE_ERRORS[name].format(0))
        # Compared as text first: int() of thousands of digits is refused (or slow).
        _require(
            len(digits) <= len(str(_JAVA_INT_MAX)) and int(digits) <= _JAVA_INT_MAX,
            at,
            f"{name} size {digits[:12]} is larger than {_JAVA_INT_MAX}",
        )


def check_bounded(document: Any, what: str, max_depth: int, max_values: int) -> None:
    """A document of any shape nested at most `max_depth` levels and holding at most `max_values`
    values (objects, arrays and scalars, counted over the whole document). Walks iteratively, so
    no document can exhaust the stack."""
    pending: list[tuple[Any, int]] = [(document, 1)]
    values = 0
    while pending:
        value, depth = pending.pop()
        values += 1
        _require(values <= max_values, what, f"holds more than {max_values} values")
        _require(depth <= max_depth, what, f"is nested deeper than {max_depth} levels")
        if isinstance(value, dict):
            pending.extend((item, depth + 1) for item in value.values())
        elif isinstance(value, list):
            pending.extend((item, depth + 1) for item in value)
