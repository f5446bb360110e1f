"""Namespace and object identifiers, validated once at the edge.

Invariant: every `Namespace` and `Identifier` that exists is valid — non-empty levels, no control
characters (which includes the 0x1F level separator), bounded length. Code past the edge never
re-validates names.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field

from cedarberg.catalog.errors import InvalidRequestError

SEPARATOR = "\x1f"
MAX_LEVEL_LENGTH = 255
MAX_DEPTH = 16
MAX_NAMESPACE_LENGTH = 1024  # the registry's column width for a joined namespace
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def _check_level(level: object, what: str) -> str:
    if not isinstance(level, str):
        raise InvalidRequestError(f"{what} must be a string")
    if not level:
        raise InvalidRequestError(f"{what} must not be empty")
    if len(level) > MAX_LEVEL_LENGTH:
        raise InvalidRequestError(f"{what} is longer than {MAX_LEVEL_LENGTH} characters")
    if _CONTROL.search(level):
        raise InvalidRequestError(f"{what} must not contain control characters")
    return level


@dataclass(frozen=True, slots=True)
class Namespace:
    levels: tuple[str, ...]
    # The stored form: levels joined by the separator (unambiguous since levels cannot hold it).
    key: str = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "key", SEPARATOR.join(self.levels))

    @classmethod
    def of(cls, levels: object) -> Namespace:
        """Validate a namespace given as a JSON list of strings."""
        if not isinstance(levels, list | tuple) or not levels:
            raise InvalidRequestError("namespace must be a non-empty list of strings")
        if len(levels) > MAX_DEPTH:
            raise InvalidRequestError(f"namespace is deeper than {MAX_DEPTH} levels")
        namespace = cls(tuple(_check_level(level, "namespace level") for level in levels))
        if len(namespace.key) > MAX_NAMESPACE_LENGTH:
            raise InvalidRequestError(f"namespace is longer than {MAX_NAMESPACE_LENGTH} characters")
        return namespace

    @classmethod
    def parse(cls, encoded: str) -> Namespace:
        """Parse a namespace from a URL path or `parent` parameter (levels joined by 0x1F)."""
        return _parse_namespace(encoded)

    @property
    def parent_key(self) -> str:
        return SEPARATOR.join(self.levels[:-1])

    def __str__(self) -> str:
        return ".".join(self.levels)


@dataclass(frozen=True, slots=True)
class Identifier:
    namespace: Namespace
    name: str

    @classmethod
    def of(cls, namespace: object, name: object) -> Identifier:
        ns = namespace if isinstance(namespace, Namespace) else Namespace.of(namespace)
        return cls(ns, _check_level(name, "name"))

    @classmethod
    def from_json(cls, data: object) -> Identifier:
        """Validate a `TableIdentifier` JSON object: {"namespace": [...], "name": "..."}."""
        if not isinstance(data, dict):
            raise InvalidRequestError("identifier must be an object with namespace and name")
        return cls.of(data.get("namespace"), data.get("name"))

    def to_json(self) -> dict[str, object]:
        return {"namespace": list(self.namespace.levels), "name": self.name}

    def __str__(self) -> str:
        return f"{self.namespace}.{self.name}"


# Every request names its namespace in the path; each distinct string is validated once (a
# Namespace is immutable, so the parsed value can be shared; invalid strings raise, uncached).
@functools.lru_cache(maxsize=4096)
def _parse_namespace(encoded: str) -> Namespace:
    return Namespace.of(encoded.split(SEPARATOR))
