"""What a sealed document is bound to (`catalog.sealing.SealTarget`): a registry copy opens only
for the row of the object and version it was sealed for; a metadata file names its object."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from cedarberg.catalog.context import CatalogContext
from cedarberg.catalog.errors import IntegrityCheckError
from cedarberg.catalog.identifiers import Identifier
from cedarberg.catalog.lookups import TABLE
from cedarberg.catalog.sealing import SealTarget
from cedarberg.catalog.store.objects import ObjectRow
from tests.support.catalogs import WAREHOUSE, catalog_context

LOCATION = "file:///w/sales/t/metadata/00001-0b7e.metadata.json"
TARGET = SealTarget(
    WAREHOUSE, Identifier.of(["sales"], "t"), TABLE, "0b7e1a52-6c1d-4d5e-9a4b-2f3c4d5e6f70", LOCATION
)
DOCUMENT = b'{"format-version":2}'


async def _row(ctx: CatalogContext, target: SealTarget, sealed_for: SealTarget) -> ObjectRow:
    key = await ctx.sealer.new_object_key(target.warehouse, target.kind, target.object_uuid)
    return ObjectRow(
        warehouse=target.warehouse,
        namespace=target.identifier.namespace.key,
        name=target.identifier.name,
        kind=target.kind,
        uuid=target.object_uuid,
        metadata_location=target.metadata_location,
        metadata=ctx.sealer.seal_record(key, sealed_for, DOCUMENT),
        version=0,
        kek_uri=key.wrapped.kek_uri,
        kek_version=key.wrapped.kek_version,
        wrapped_key=key.wrapped.ciphertext,
    )


async def test_a_registry_copy_opens_for_the_version_it_was_sealed_for(
    tmp_path: Path, registry_url: str
) -> None:
    async with catalog_context(tmp_path, url=registry_url) as ctx:
        assert await ctx.sealer.open_row(await _row(ctx, TARGET, TARGET)) == DOCUMENT


@pytest.mark.parametrize(
    "other",
    [
        {"metadata_location": "file:///w/sales/t/metadata/00000-0b7e.metadata.json"},  # rolled back
        {"kind": "view"},
        {"warehouse": "elsewhere"},
    ],
)
async def test_a_registry_copy_sealed_for_another_target_is_refused(
    tmp_path: Path, registry_url: str, other: dict[str, str]
) -> None:
    async with catalog_context(tmp_path, url=registry_url) as ctx:
        row = await _row(ctx, TARGET, dataclasses.replace(TARGET, **other))
        with pytest.raises(IntegrityCheckError):
            await ctx.sealer.open_row(row)


async def test_a_sealed_file_names_its_object(tmp_path: Path, registry_url: str) -> None:
    async with catalog_context(tmp_path, url=registry_url) as ctx:
        key = await ctx.sealer.new_object_key(WAREHOUSE, TABLE, TARGET.object_uuid)
        content = ctx.sealer.seal_file(key, TARGET, DOCUMENT)
        opened = await ctx.sealer.open_file(WAREHOUSE, LOCATION, content)
    assert (opened.kind, opened.object_uuid) == (TABLE, TARGET.object_uuid)
    assert opened.identifier == (["sales"], "t")
    assert opened.metadata_json == DOCUMENT
