"""The user directory (`gateway.authn.directory`) on both stores: what engines' users are and
which groups they are in, shared by every gateway process through the registry's database."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from cedarberg.gateway.authn.directory import InvalidDirectoryRequestError, UserDirectory
from cedarberg.gateway.authn.key_store import KeyStore, open_key_store


@pytest.fixture(params=["sqlite", "postgres"])
async def stores(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[tuple[KeyStore, KeyStore]]:
    """Two stores on one database, as two gateway processes have."""
    if request.param == "postgres":
        url = request.getfixturevalue("postgres_url")
    else:
        url = f"sqlite+aiosqlite:///{tmp_path / 'registry.db'}"
    first = await open_key_store(url)
    second = await open_key_store(url)
    yield first, second
    await first.close()
    await second.close()


async def test_a_listed_user_is_seen_by_every_process_and_replaced_whole(
    stores: tuple[KeyStore, KeyStore],
) -> None:
    mine, theirs = UserDirectory(stores[0]), UserDirectory(stores[1])
    created = await mine.put("alice", ["analysts", "etl", "analysts"])
    assert created.groups == ("analysts", "etl")
    seen = await theirs.get("alice")
    assert seen is not None
    assert seen.groups == ("analysts", "etl")
    replaced = await theirs.put("alice", ["interns"])
    assert replaced.groups == ("interns",)
    assert replaced.created_at == created.created_at
    again = await mine.get("alice")
    assert again is not None
    assert again.groups == ("interns",)
    assert await theirs.delete("alice")
    assert await mine.get("alice") is None
    assert not await mine.delete("alice")


async def test_concurrent_listings_of_one_name_leave_one_user(stores: tuple[KeyStore, KeyStore]) -> None:
    mine, theirs = UserDirectory(stores[0]), UserDirectory(stores[1])
    results = await asyncio.gather(
        *(d.put("bob", [g]) for d, g in ((mine, "a"), (theirs, "b")) for _ in range(3))
    )
    assert {r.name for r in results} == {"bob"}
    listed = await mine.list()
    assert [u.name for u in listed] == ["bob"]


async def test_listing_pages_in_name_order(stores: tuple[KeyStore, KeyStore]) -> None:
    directory = UserDirectory(stores[0])
    for name in ("carol", "alice", "bob"):
        await directory.put(name, [])
    assert [u.name for u in await directory.list(limit=2)] == ["alice", "bob"]
    assert [u.name for u in await directory.list(after="bob")] == ["carol"]


@pytest.mark.parametrize(
    ("name", "groups"),
    [
        ("", []),
        (" alice", []),
        ("ops/alice", []),
        ("al\u0000ice", []),
        ("alice", ["corp/admins"]),
        ("alice", [""]),
        ("alice", [f"g{i}" for i in range(65)]),
    ],
)
async def test_names_and_groups_another_source_could_spell_are_refused(
    stores: tuple[KeyStore, KeyStore], name: str, groups: list[str]
) -> None:
    directory = UserDirectory(stores[0])
    with pytest.raises(InvalidDirectoryRequestError):
        await directory.put(name, groups)
    assert await directory.list() == []
