"""Parsed table and view metadata kept per metadata version, so a commit does not parse again the
metadata the previous commit produced.

A metadata file is never rewritten: a new version has a new `metadata_location`, so an entry keyed
by (kind, object UUID, metadata location) can never be stale. A landed commit keeps the metadata
it built (`keep`), which is what parsing its JSON would give (tests/catalog/test_parsed_metadata.py
holds every update type to that), and the next commit to the object starts from it.

The models handed out are shared by every commit that reads the version: no consumer may change
them (pyiceberg's update steps and ours only ever build new models, `table_metadata` says how).
The cache saves the parse only: the caller still unwraps the data key and opens the sealed
registry copy before it asks, so a key the KMS no longer unwraps, or a registry copy that fails
its check, fails the commit as it did.

What bounds it is memory (`max_bytes`, least recently used first; a model is counted as
`SIZE_FACTOR` times its JSON, which its pydantic objects measure about 5.5 times) and age
(`max_age_seconds`, so a dropped object's plaintext does not linger). A model larger than a
quarter of the budget is not kept. Used from the event loop only.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar, cast

from cedarberg.catalog.aged_lru import AgedLru

DEFAULT_MAX_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_AGE_SECONDS = 300.0
SIZE_FACTOR = 8

T = TypeVar("T")
# (kind, object UUID, metadata location): the kind keeps a table's and a view's models apart.
Key = tuple[str, str, str]


class ParsedMetadataCache(AgedLru[Key, object]):
    """See the module docstring."""

    def __init__(
        self, max_bytes: int = DEFAULT_MAX_BYTES, max_age_seconds: float = DEFAULT_MAX_AGE_SECONDS
    ) -> None:
        super().__init__(max_bytes, max_age_seconds)

    def get_or_parse(self, key: Key, metadata_json: bytes, parse: Callable[[bytes], T]) -> T:
        """The model of version `key`, whose JSON is `metadata_json`: kept, or `parse`d (and kept
        if it fits). `parse` must be the one parser of `key`'s kind."""
        kept = self.get(key)
        if kept is not None:
            return cast(T, kept)
        parsed = parse(metadata_json)
        self.keep(key, parsed, len(metadata_json))
        return parsed

    def keep(self, key: Key, metadata: object, json_bytes: int) -> None:
        """Keep `metadata` (whose JSON is `json_bytes` long) as version `key`, if it fits."""
        self.put(key, metadata, json_bytes * SIZE_FACTOR)
