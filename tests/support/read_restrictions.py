"""Validation of `read-restrictions` documents against the spec's ReadRestrictions schema
(vendored in read_restrictions_schema.yaml, see its header for where it comes from).

Two things the schema says that JSON Schema alone does not check are checked here as the spec
means them:
- `Action` chooses its schema by the `discriminator` mapping (OpenAPI, not JSON Schema): an action
  must be a mapped name and validate against its mapped schema;
- `PrimitiveTypeValue` is a `oneOf` whose branches overlap (every string is a StringTypeValue and
  a DecimalTypeValue, ...), so no value validates under strict `oneOf`; it is read as "one of these
  shapes" (`anyOf`), which is what the spec intends.
"""

from __future__ import annotations

import copy
from functools import cache
from pathlib import Path
from typing import Any

import yaml
from jsonschema import Draft202012Validator

SCHEMA_FILE = Path(__file__).with_name("read_restrictions_schema.yaml")


@cache
def _components() -> dict[str, Any]:
    document = yaml.safe_load(SCHEMA_FILE.read_text())
    schemas = copy.deepcopy(document["components"]["schemas"])
    schemas["PrimitiveTypeValue"] = {"anyOf": schemas["PrimitiveTypeValue"].pop("oneOf")}
    return {"components": {"schemas": schemas}}


def _validator(name: str) -> Draft202012Validator:
    return Draft202012Validator({"$ref": f"#/components/schemas/{name}", **_components()})


def action_names() -> list[str]:
    """The actions the spec's discriminator maps."""
    return list(_components()["components"]["schemas"]["Action"]["discriminator"]["mapping"])


def validate(document: Any) -> None:
    """Raise `jsonschema.ValidationError` (or AssertionError) unless `document` is a valid
    ReadRestrictions object."""
    _validator("ReadRestrictions").validate(document)
    mapping = _components()["components"]["schemas"]["Action"]["discriminator"]["mapping"]
    for projection in document.get("required-column-projections") or []:
        target = mapping.get(projection["action"])
        assert target is not None, f"action {projection['action']!r} is not one the spec defines"
        _validator(target.rsplit("/", 1)[1]).validate(projection)
