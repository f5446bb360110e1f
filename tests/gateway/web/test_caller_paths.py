"""No I/O on a caller's path before it is decided (issue 27 §3): registerTable and registerView
read no file before the caller may have it, and a create writes nothing in another object's place.

The attacker is an ordinary writer of namespace `mine` (etl-bot); `other` is someone else's and
answers 404 to it on every catalog route. Registering into `mine`, it names files in `other`, in a
namespace that does not exist, outside the warehouse, inside another table and in its own
namespace where there is no file: every one of these gets the same answer, and nothing is read —
the FIFOs among them would block any reader, and afterwards no one has them open. The controls
register a file of the writer's own namespace, overwrite a table with its own file, and keep the
reference catalog's answer for a name that is taken.
"""

from __future__ import annotations

import errno
import json
import os
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.gateway.web.conftest import InProcessGateway, MakeGateway

REFUSED = {
    "message": "metadata-location does not name a metadata file this namespace can register",
    "type": "BadRequestException",
    "code": 400,
}


def _spelled(path: Path, how: int) -> str:
    """One of the spellings the catalog accepts for a local place."""
    text = str(path)
    return [f"file://{text}", f"file:{text}", text, f"file://localhost{text}"][how % 4]


def _plant(directory: Path, metadata: dict[str, Any]) -> Path:
    """A plain metadata file at `directory`/metadata whose table lives at `directory`, with a UUID
    of its own: a file that registers wherever the caller may read it."""
    document = dict(metadata, location=directory.as_uri(), **{"table-uuid": str(uuid.uuid4())})
    path = directory / "metadata" / f"00000-{uuid.uuid4()}.metadata.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(document))
    return path


def _assert_never_opened(fifo: Path) -> None:
    """Opening a FIFO to write without blocking fails with ENXIO exactly when no reader has it
    open (a reader blocked in open counts): the gateway never opened it."""
    with pytest.raises(OSError) as raised:
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    assert raised.value.errno == errno.ENXIO


class Lake:
    """Namespaces `mine` (written by etl-bot) and `other` (by a group no test principal has) in one
    warehouse (`prefix`), a table in each."""

    def __init__(self, gw: InProcessGateway, prefix: str) -> None:
        self.gw = gw
        self.prefix = prefix

    def url(self, path: str) -> str:
        return f"/v1/{self.prefix}/{path}"

    async def setup(self) -> None:
        for namespace, writers in (("mine", "etl"), ("other", "theirs")):
            answer = await self.gw.client.post(
                self.url("namespaces"),
                json={"namespace": [namespace], "properties": {"cedarberg.writers": writers}},
                headers=self.gw.as_("root"),
            )
            assert answer.status == 200, await answer.text()

    async def create(self, namespace: str, name: str, principal: str) -> dict[str, Any]:
        answer = await self.gw.client.post(
            self.url(f"namespaces/{namespace}/tables"),
            json={"name": name, "schema": {"type": "struct", "fields": []}},
            headers=self.gw.as_(principal),
        )
        assert answer.status == 200, await answer.text()
        document: dict[str, Any] = await answer.json()
        return document

    async def register(self, name: str, location: str, *, view: bool = False, overwrite: bool = False) -> Any:
        path = "register-view" if view else "register"
        body: dict[str, Any] = {"name": name, "metadata-location": location}
        if overwrite:
            body["overwrite"] = True
        return await self.gw.client.post(
            self.url(f"namespaces/mine/{path}"), json=body, headers=self.gw.as_("etl-bot")
        )

    async def tables(self, namespace: str) -> list[Any]:
        answer = await self.gw.client.get(
            self.url(f"namespaces/{namespace}/tables"), headers=self.gw.as_("root")
        )
        listed: list[Any] = (await answer.json())["identifiers"]
        return listed


async def _lake(make_gateway: MakeGateway, config: dict[str, Any], prefix: str) -> Lake:
    gw = await make_gateway(anonymous=False, config={"warehouses": config})
    lake = Lake(gw, prefix)
    await lake.setup()
    return lake


def _local(location: str) -> Path:
    return Path(location.removeprefix("file://"))


async def test_not_there_and_not_yours_get_one_answer_and_nothing_is_read(
    make_gateway: MakeGateway, tmp_path: Path
) -> None:
    lake = await _lake(make_gateway, {"default": {"seal_metadata_files": False}}, "default")
    victim = await lake.create("other", "victim", "root")
    source = await lake.create("mine", "source", "etl-bot")
    victim_dir = _local(victim["metadata"]["location"])
    other_dir, mine_dir = victim_dir.parent, _local(source["metadata"]["location"]).parent
    warehouse = other_dir.parent
    assert (
        await lake.gw.client.get(lake.url("namespaces/other"), headers=lake.gw.as_("etl-bot"))
    ).status == 404

    loose = _plant(other_dir / "loose", source["metadata"])  # valid, in `other`, in no table
    outside = _plant(tmp_path / "outside", source["metadata"])
    (mine_dir / "empty").mkdir()
    fifos = [other_dir / "pipe.metadata.json", mine_dir / "pipe.metadata.json"]
    for fifo in fifos:
        os.mkfifo(fifo)
    places = [
        victim_dir,  # an existing directory: another namespace's table
        victim_dir / "metadata",
        _local(victim["metadata-location"]),  # an existing metadata file of that table
        other_dir / "nothing.metadata.json",  # a missing file in the hidden namespace
        loose,
        fifos[0],
        other_dir,
        warehouse / "ghost" / "00000.metadata.json",  # a namespace that does not exist
        outside,  # a valid file outside the warehouse
        warehouse,
        # In the writer's own namespace: no file there, or another table's file.
        mine_dir,
        mine_dir / "empty",
        mine_dir / "nothing.metadata.json",
        fifos[1],
        _local(source["metadata-location"]),
    ]
    before = await lake.tables("mine")
    for i, place in enumerate(places):
        answer = await lake.register("loot", _spelled(place, i))
        assert (answer.status, (await answer.json())["error"]) == (400, REFUSED), place
        view = await lake.register("vloot", _spelled(place, i), view=True)
        assert (view.status, (await view.json())["error"]) == (400, REFUSED), place
    for fifo in fifos:
        _assert_never_opened(fifo)
    assert await lake.tables("mine") == before
    assert await lake.tables("other") == [{"namespace": ["other"], "name": "victim"}]
    views = await lake.gw.client.get(lake.url("namespaces/mine/views"), headers=lake.gw.as_("root"))
    assert (await views.json())["identifiers"] == []


async def test_control_a_file_of_the_own_namespace_registers_and_a_table_is_overwritten_with_its_own(
    make_gateway: MakeGateway,
) -> None:
    lake = await _lake(make_gateway, {"default": {"seal_metadata_files": False}}, "default")
    source = await lake.create("mine", "source", "etl-bot")
    # In an object directory of its own, as every root of a table must be (catalog/roots.py).
    copy = f"copy-{uuid.uuid4().hex}"
    planted = _plant(_local(source["metadata"]["location"]).parent / copy, source["metadata"])
    registered = await lake.register("copied", f"file:{planted}")
    assert registered.status == 200, await registered.text()
    assert (await registered.json())["metadata-location"] == planted.as_uri()
    loaded = await lake.gw.client.get(
        lake.url("namespaces/mine/tables/copied"), headers=lake.gw.as_("etl-bot")
    )
    assert loaded.status == 200
    # The name is taken: the reference catalog's answer, before any file is looked at.
    taken = await lake.register("source", source["metadata-location"])
    assert taken.status == 409
    assert (await taken.json())["error"]["message"] == "Table already exists: mine.source"
    # Overwriting a table with its own metadata file reads that table's files.
    again = await lake.register("source", source["metadata-location"], overwrite=True)
    assert again.status == 200, await again.text()
    assert (await again.json())["metadata-location"] == source["metadata-location"]


async def test_a_migration_warehouse_reads_outside_namespaces_but_never_in_another_one(
    make_gateway: MakeGateway, tmp_path: Path
) -> None:
    mig = tmp_path / "mig"
    config = {
        "mig": {
            "location": mig.as_uri(),
            "seal_metadata_files": False,
            "allow_locations_outside_namespace": True,
        }
    }
    lake = await _lake(make_gateway, config, "mig")
    source = await lake.create("mine", "source", "etl-bot")
    theirs = _plant(mig / "other" / "loose", source["metadata"])
    answer = await lake.register("loot", str(theirs))
    assert (answer.status, (await answer.json())["error"]) == (400, REFUSED)
    legacy = _plant(mig / "legacy" / "orders", source["metadata"])
    registered = await lake.register("orders", str(legacy))
    assert registered.status == 200, await registered.text()
    assert (await registered.json())["metadata"]["location"] == (mig / "legacy" / "orders").as_uri()


async def test_a_create_over_another_object_writes_nothing_there(
    make_gateway: MakeGateway, tmp_path: Path
) -> None:
    mig = tmp_path / "mig"
    config = {"mig": {"location": mig.as_uri(), "allow_locations_outside_namespace": True}}
    lake = await _lake(make_gateway, config, "mig")
    victim_dir = _local((await lake.create("other", "victim", "root"))["metadata"]["location"])
    before = sorted(victim_dir.rglob("*"))
    spy = victim_dir / "spy"
    answer = await lake.gw.client.post(
        lake.url("namespaces/mine/tables"),
        json={"name": "spy", "schema": {"type": "struct", "fields": []}, "location": spy.as_uri()},
        headers=lake.gw.as_("etl-bot"),
    )
    assert answer.status == 400
    assert "overlaps the location of another table or view" in (await answer.json())["error"]["message"]
    assert sorted(victim_dir.rglob("*")) == before, "no directory or file was made in the other table"
    # Control: the same create at a free place outside any namespace.
    free = mig / "legacy" / "spy"
    answer = await lake.gw.client.post(
        lake.url("namespaces/mine/tables"),
        json={"name": "spy", "schema": {"type": "struct", "fields": []}, "location": free.as_uri()},
        headers=lake.gw.as_("etl-bot"),
    )
    assert answer.status == 200, await answer.text()
    assert list((free / "metadata").glob("*.metadata.json"))
