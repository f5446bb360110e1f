"""A soft drop changes the registry before it moves any file (found by the crash harness,
tests/e2e/test_crash_consistency.py): a process killed between the two must never leave a live
registry entry whose metadata files were parked away. And a drop whose process died after the
registry changed, before its files moved, is undropped and purged from where its files are."""

from __future__ import annotations

import urllib.parse
from pathlib import Path

import orjson
import pytest

from cedarberg.catalog import dropped, fileio
from cedarberg.catalog import requests as req
from cedarberg.catalog.context import CatalogContext
from cedarberg.catalog.identifiers import Identifier, Namespace
from cedarberg.catalog.namespaces import NamespaceService
from cedarberg.catalog.pagination import PageRequest
from cedarberg.catalog.store import dropped as dropped_rows
from cedarberg.catalog.store import objects as object_rows
from cedarberg.catalog.tables import TableService
from tests.support import registry
from tests.support.catalogs import WAREHOUSE, catalog_context

NAMESPACE = Namespace.of(["ns"])
TABLE = Identifier.of(NAMESPACE, "t")
SCHEMA = {"type": "struct", "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}


async def _allow(_effects: object) -> None:
    return None


async def _table_with_history(ctx: CatalogContext) -> list[Path]:
    """Create ns.t and commit to it once: its metadata files (current and logged), as paths."""
    await NamespaceService(ctx).create(None, NAMESPACE, {}, None)
    create = req.parse(req.CreateTableRequest, {"name": "t", "schema": SCHEMA})
    await TableService(ctx).create(None, NAMESPACE, create, None, _allow)
    change = {"requirements": [], "updates": [{"action": "set-properties", "updates": {"k": "v"}}]}
    await TableService(ctx).commit(None, TABLE, req.parse(req.CommitTableRequest, change), None, _allow)
    async with ctx.store.read() as tx:
        row = await object_rows.get_object(tx, WAREHOUSE, NAMESPACE.key, "t")
    assert row is not None
    directory = _path(row.metadata_location).parent
    files = sorted(directory.glob("*.metadata.json"))
    assert len(files) == 2, files
    return files


def _path(location: str) -> Path:
    return Path(urllib.parse.unquote(urllib.parse.urlparse(location).path))


async def test_no_file_moves_while_the_registry_still_names_the_table(
    tmp_path: Path, registry_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with catalog_context(tmp_path, url=registry_url) as ctx:
        await _table_with_history(ctx)
        live_at_each_move: list[bool] = []
        real_move = fileio.move_file

        def recording_move(source: str, target: str) -> None:
            # What a process killed at this moment leaves: is the table still live in the registry?
            [(live,)] = registry.query_url(
                registry_url, "SELECT count(*) FROM catalog_objects WHERE name = 't'"
            )
            live_at_each_move.append(live == 1)
            real_move(source, target)

        monkeypatch.setattr(fileio, "move_file", recording_move)
        await TableService(ctx).drop(None, TABLE, True, None)
        assert live_at_each_move == [False, False]  # both metadata files moved, after the drop
        assert await dropped.purge_due(ctx) == 1  # and, moved, it released its hold on the purge


class _ProcessDied(BaseException):
    """What a SIGKILL does to a drop: nothing after this point runs (no cleanup either)."""


async def _drop_dying_before_the_moves(ctx: CatalogContext, monkeypatch: pytest.MonkeyPatch) -> str:
    """Drop ns.t as a process killed after the registry changed, before any file moved; its drop id."""

    def die(_moves: object) -> None:
        raise _ProcessDied

    with monkeypatch.context() as patch:
        patch.setattr(dropped, "_park", die)
        with pytest.raises(_ProcessDied):
            await TableService(ctx).drop(None, TABLE, True, None)
    listed = orjson.loads(
        await dropped.list_dropped(ctx, None, PageRequest.parse(None, None, 100, 100, "test"))
    )
    assert len(listed["dropped"]) == 1, listed
    return str(listed["dropped"][0]["drop-id"])


async def test_a_drop_that_died_before_its_files_moved_is_undropped_whole(
    tmp_path: Path, registry_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with catalog_context(tmp_path, url=registry_url) as ctx:
        files = await _table_with_history(ctx)
        drop_id = await _drop_dying_before_the_moves(ctx, monkeypatch)
        assert all(path.is_file() for path in files)  # still published; the table is dropped

        await dropped.undrop(ctx, None, drop_id, None)
        _etag, body = await TableService(ctx).load(None, TABLE, "all", None)
        assert body is not None
        assert orjson.loads(body)["metadata"]["properties"]["k"] == "v"
        assert all(path.is_file() for path in files)


async def test_a_drop_that_died_before_its_files_moved_is_purged_whole(
    tmp_path: Path, registry_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async with catalog_context(tmp_path, url=registry_url) as ctx:
        files = await _table_with_history(ctx)
        await _drop_dying_before_the_moves(ctx, monkeypatch)
        # The retention is 0, but the dead drop's hold on the purge (it might still be moving
        # files) lasts until PARKING_HOLD_MS has passed: then the purge completes.
        assert await dropped.purge_due(ctx) == 0
        later = dropped._now_ms() + dropped.PARKING_HOLD_MS + 1000
        monkeypatch.setattr(dropped, "_now_ms", lambda: later)
        assert await dropped.purge_due(ctx) == 1
        assert not any(path.exists() for path in files)
        assert not files[0].parent.parent.exists()  # the table's directory is gone
        async with ctx.store.read() as tx:
            assert await dropped_rows.list_dropped(tx, WAREHOUSE, None, 10) == []
