"""How deeply a JSON document nests, measured on its raw bytes before any parser sees it.

The parsers a request body goes through recurse once per level: orjson (to its own limit of
1024), then pydantic and pyiceberg's type and expression models, which spend about seven Python
frames per level of a nested list type or a left-deep filter. Python's recursion limit (1000
frames) is reached around 140 levels, and the RecursionError would be a 500. So the depth is
bounded first, on the bytes, where counting costs no recursion at all.

    check_depth(raw, 100)    # raises InvalidRequestError when raw nests deeper than 100 levels
"""

from __future__ import annotations

import re

from cedarberg.catalog.errors import InvalidRequestError

# Brackets, and strings skipped whole (a bracket inside a string does not nest). The string
# alternative matches at every quote, terminated or not (an unterminated string runs to the end),
# with possessive loops: one linear pass over any input, whatever its quotes and backslashes.
_TOKEN = re.compile(rb'[\[{]|[\]}]|"(?:[^"\\]++|\\.)*+(?:"|\\?\Z)', re.DOTALL)
# The deepest document every parser is known to read with room to spare (about 140 levels are
# where nested lists and left-deep filters exhaust Python's stack): the request body bound's
# default and maximum (the gateway's `max_body_depth`).
MAX_SAFE_DEPTH = 100
# A metadata file holds a schema a few levels deeper than the request that made it did
# (metadata, schemas, schema): a registered file may nest this deep.
MAX_METADATA_FILE_DEPTH = MAX_SAFE_DEPTH + 10
_OPENING = frozenset(b"[{")
_CLOSING = frozenset(b"]}")


def depth(raw: bytes) -> int:
    """The deepest nesting of objects and arrays in `raw` (0 for a scalar). Defined for any bytes:
    for malformed JSON it is an upper bound of what a parser could reach before failing."""
    deepest = level = 0
    for token in _TOKEN.finditer(raw):
        first = raw[token.start()]
        if first in _OPENING:
            level += 1
            deepest = max(deepest, level)
        elif first in _CLOSING:
            level = max(level - 1, 0)  # a stray closing bracket never lets a later level go uncounted
    return deepest


def check_depth(raw: bytes, max_depth: int, what: str = "request body") -> None:
    """Refuse `raw` (`what`: how the message names it) if its objects and arrays nest deeper than
    `max_depth` levels.

    Costs two byte counts for a document with at most `max_depth` brackets (most commits), else
    one regular-expression pass. Raises InvalidRequestError naming the limit."""
    if raw.count(b"[") + raw.count(b"{") <= max_depth:
        return  # so few brackets cannot nest deeper
    if depth(raw) > max_depth:
        raise InvalidRequestError(f"{what} is nested deeper than {max_depth} levels")
