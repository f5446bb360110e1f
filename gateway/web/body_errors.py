"""A request body's validation error in the caller's terms: the field's path and what was expected.

pydantic's own messages name Python types and classes ("Input should be a valid dictionary or
instance of ExplainResource"), which say nothing to a caller and expose the gateway's internals.
`describe` turns the first error into `invalid request: <field path>: <what was expected>`, e.g.

    invalid request: resource.type: expected one of catalog, warehouse, namespace, table, view or api-key
    invalid request: groups[2]: expected a string
    invalid request: resource.colour: not a field here (the fields are type, warehouse, ...)

Every pydantic error type a strict admin body can raise has a text here; any other falls back to
pydantic's message with class names removed. Messages are bounded (`MAX_MESSAGE_CHARS`) and never
echo the rejected value.
"""

from __future__ import annotations

import re
import types
from typing import Any, Union, get_args, get_origin

from pydantic import BaseModel, ValidationError
from pydantic_core import ErrorDetails

MAX_MESSAGE_CHARS = 400
_MAX_PATH_CHARS = 100

# What a value of the wrong JSON type should have been, by pydantic error type.
_EXPECTED = {
    "model_type": "an object",
    "model_attributes_type": "an object",
    "dict_type": "an object",
    "list_type": "a list",
    "tuple_type": "a list",
    "set_type": "a list",
    "string_type": "a string",
    "bool_type": "true or false",
    "int_type": "an integer",
    "int_parsing": "an integer",
    "float_type": "a number",
    "none_required": "null",
}
_CLASS_MENTION = re.compile(r",? or (an )?instance of \w+|(an )?instance of \w+")


def describe(model: type[BaseModel], err: ValidationError) -> str:
    """`invalid request: <path>: <problem>` for the first error of `err`, raised validating `model`."""
    first = err.errors(include_url=False, include_input=False)[0]
    message = f"invalid request: {_path(first['loc'])}: {_problem(model, first)}"
    return message[:MAX_MESSAGE_CHARS]


def _path(loc: tuple[int | str, ...]) -> str:
    """`resource.namespace[0]`: names joined by dots, list positions in brackets."""
    text = ""
    for part in loc:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    if len(text) > _MAX_PATH_CHARS:
        text = "..." + text[-_MAX_PATH_CHARS:]  # the innermost part says what is wrong
    return text or "body"


def _problem(model: type[BaseModel], error: ErrorDetails) -> str:
    kind = error["type"]
    ctx: dict[str, Any] = dict(error.get("ctx") or {})
    if kind == "missing":
        return "is required"
    if kind == "extra_forbidden":
        parent = _model_at(model, error["loc"][:-1])
        if parent is None:
            return "not a field here"
        return f"not a field here (the fields are {', '.join(parent.model_fields)})"
    if kind == "literal_error" and "expected" in ctx:
        return f"expected one of {str(ctx['expected']).replace(chr(39), '')}"
    if kind in _EXPECTED:
        return f"expected {_EXPECTED[kind]}"
    if kind == "string_too_short":
        return f"must be at least {ctx.get('min_length', 1)} character(s) long"
    if kind == "string_too_long":
        return f"must be at most {ctx.get('max_length')} characters long"
    if kind == "too_short":
        return f"must have at least {ctx.get('min_length')} item(s)"
    if kind == "too_long":
        return f"must have at most {ctx.get('max_length')} items"
    message = str(error["msg"]).removeprefix("Value error, ")
    return _CLASS_MENTION.sub("", message).strip() or "is not valid"


def _model_at(model: type[BaseModel], loc: tuple[int | str, ...]) -> type[BaseModel] | None:
    """The body model that field path `loc` leads to inside `model` (list positions skipped), or
    None where it leads to something else."""
    current: type[BaseModel] | None = model
    for part in loc:
        if isinstance(part, int):
            continue
        if current is None or part not in current.model_fields:
            return None
        current = _inner_model(current.model_fields[part].annotation)
    return current


def _inner_model(annotation: Any) -> type[BaseModel] | None:
    """The model class inside `X`, `X | None`, `list[X]` or `dict[str, X]`, if any."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if get_origin(annotation) in (Union, types.UnionType, list, dict, tuple):
        for arg in get_args(annotation):
            inner = _inner_model(arg)
            if inner is not None:
                return inner
    return None
