"""Page tokens reveal nothing and open only for the listing and the caller they came from.

Attack (issue 15, section 4): a reader's `GET /v1/namespaces?pageSize=1` returned a token that
base64-decoded to the name of a namespace it may not see, and a crafted token worked as a name
oracle. Control: paging through every listing still works, also in a new gateway process, and an
empty `pageToken=` (as Spark sends it) is the first page.
"""

from __future__ import annotations

import base64
import binascii
import time
from collections.abc import Iterator
from typing import Any

import orjson
import pytest
import requests

from tests.gateway.test_bad_input import assert_error
from tests.support.secure import HTTP_TIMEOUT, SecureGateway

SCHEMA = {
    "type": "struct",
    "schema-id": 0,
    "fields": [{"id": 1, "name": "id", "type": "long", "required": False}],
}
VISIBLE = ["alpha", "mike", "zulu"]
HIDDEN = ["hidden-merger-plans", "nsecret"]  # sorted between the visible ones


class Env:
    def __init__(self, gw: SecureGateway) -> None:
        self.gw = gw
        self.reader_key = gw.create_key("ana", ["bi"])
        self.other_reader_key = gw.create_key("ben", ["bi"])
        self.reader = gw.session(self.reader_key)
        self.other_reader = gw.session(self.other_reader_key)


@pytest.fixture(scope="module")
def env(tmp_path_factory: pytest.TempPathFactory, module_store_url: str | None) -> Iterator[Env]:
    with SecureGateway(tmp_path_factory.mktemp("page-tokens"), store_url=module_store_url) as gw:
        for name in VISIBLE:
            gw.create_namespace(name, readers=["bi"])
        for name in HIDDEN:
            gw.create_namespace(name)
        for table in ("t1", "t2", "t3"):
            created = gw.admin.post(
                gw.catalog_url("namespaces/alpha/tables"),
                json={"name": table, "schema": SCHEMA},
                timeout=HTTP_TIMEOUT,
            )
            assert created.status_code == 200, created.text
        for view in ("v1", "v2", "v3"):
            created = gw.admin.post(
                gw.catalog_url("namespaces/alpha/views"), json=_view(view), timeout=HTTP_TIMEOUT
            )
            assert created.status_code == 200, created.text
        yield Env(gw)


def _view(name: str) -> dict[str, Any]:
    return {
        "name": name,
        "schema": SCHEMA,
        "view-version": {
            "version-id": 1,
            "timestamp-ms": int(time.time() * 1000),
            "schema-id": 0,
            "summary": {"engine-name": "test"},
            "representations": [{"type": "sql", "sql": "SELECT 1 AS id", "dialect": "spark"}],
            "default-namespace": ["alpha"],
        },
        "properties": {},
    }


def _decoded(token: str) -> bytes:
    try:
        return base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
    except (binascii.Error, ValueError):
        return b""


def _walk(
    session: requests.Session, url: str, key: str, first_token: str = ""
) -> tuple[list[Any], list[str]]:
    """Every item of a listing, one per page; and the tokens handed out on the way."""
    items: list[Any] = []
    tokens: list[str] = []
    token = first_token
    for _ in range(50):
        answer = session.get(url, params={"pageSize": "1", "pageToken": token}, timeout=HTTP_TIMEOUT)
        assert answer.status_code == 200, answer.text
        document = answer.json()
        items += document[key]
        token = document.get("next-page-token")
        if not token:
            return items, tokens
        tokens.append(token)
    raise AssertionError("listing did not end")


def test_tokens_reveal_no_hidden_name_and_paging_sees_only_visible_namespaces(env: Env) -> None:
    names, tokens = _walk(env.reader, env.gw.catalog_url("namespaces"), "namespaces")
    assert names == [[name] for name in VISIBLE]
    assert len(tokens) >= len(VISIBLE + HIDDEN) - 1  # one page per raw namespace
    for token in tokens:
        raw = _decoded(token) + token.encode()
        for name in VISIBLE + HIDDEN:
            assert name.encode() not in raw, (name, token)
    assert len({len(token) for token in tokens}) == 1  # not even the name's length shows


def test_crafted_and_altered_tokens_are_400(env: Env) -> None:
    url = env.gw.catalog_url("namespaces")
    _, tokens = _walk(env.reader, url, "namespaces")
    crafted = base64.urlsafe_b64encode(orjson.dumps({"v": 1, "after": "hidden"})).decode().rstrip("=")
    raw = bytearray(_decoded(tokens[0]))
    raw[len(raw) // 2] ^= 0x20
    flipped = base64.urlsafe_b64encode(bytes(raw)).decode().rstrip("=")
    for token in (crafted, flipped, tokens[0][:-4], "not a token", "A" * 6000):
        answer = env.reader.get(url, params={"pageSize": "1", "pageToken": token}, timeout=HTTP_TIMEOUT)
        assert_error(answer, 400, "BadRequestException")
        assert "hidden" not in answer.text


def test_a_token_of_another_listing_or_caller_is_400(env: Env) -> None:
    gw = env.gw
    _, namespace_tokens = _walk(env.reader, gw.catalog_url("namespaces"), "namespaces")
    _, table_tokens = _walk(env.reader, gw.catalog_url("namespaces/alpha/tables"), "identifiers")
    token = namespace_tokens[0]
    foreign = [
        (env.reader, gw.catalog_url("namespaces/alpha/tables"), token),  # namespaces -> tables
        (env.reader, gw.catalog_url("namespaces/alpha/views"), table_tokens[0]),  # tables -> views
        (env.reader, gw.catalog_url("namespaces"), table_tokens[0]),  # tables -> namespaces
    ]
    for session, url, used in foreign:  # all the same caller: only the listing differs
        answer = session.get(url, params={"pageSize": "1", "pageToken": used}, timeout=HTTP_TIMEOUT)
        assert_error(answer, 400, "BadRequestException")
    # Child namespaces of another parent: the token names the parent it was made under.
    answer = env.reader.get(
        gw.catalog_url("namespaces"),
        params={"parent": "alpha", "pageSize": "1", "pageToken": token},
        timeout=HTTP_TIMEOUT,
    )
    assert_error(answer, 400, "BadRequestException")
    # Another principal with the same grants: the token is bound to the one it was given to.
    answer = env.other_reader.get(
        gw.catalog_url("namespaces"), params={"pageSize": "1", "pageToken": token}, timeout=HTTP_TIMEOUT
    )
    assert_error(answer, 400, "BadRequestException")
    # The same principal through a gateway token (another authentication method) is another caller.
    with gw.session(gw.token(env.reader_key)) as by_token:
        answer = by_token.get(
            gw.catalog_url("namespaces"), params={"pageSize": "1", "pageToken": token}, timeout=HTTP_TIMEOUT
        )
    assert_error(answer, 400, "BadRequestException")
    # Control: the owner's token still resumes its own listing.
    resumed = env.reader.get(
        gw.catalog_url("namespaces"), params={"pageSize": "1", "pageToken": token}, timeout=HTTP_TIMEOUT
    )
    assert resumed.status_code == 200, resumed.text


def test_paging_through_tables_and_views_and_an_empty_token_is_the_first_page(env: Env) -> None:
    gw = env.gw
    tables, _ = _walk(env.reader, gw.catalog_url("namespaces/alpha/tables"), "identifiers")
    assert [t["name"] for t in tables] == ["t1", "t2", "t3"]
    views, _ = _walk(env.reader, gw.catalog_url("namespaces/alpha/views"), "identifiers")
    assert [v["name"] for v in views] == ["v1", "v2", "v3"]
    first = env.reader.get(gw.catalog_url("namespaces"), params={"pageToken": ""}, timeout=HTTP_TIMEOUT)
    assert first.status_code == 200, first.text
    assert first.json()["namespaces"] == [[name] for name in VISIBLE]


def test_tokens_open_in_a_restarted_gateway_process(env: Env) -> None:
    """The key is the deployment's (derived from the registry key), not the process's: a token
    handed out by one process resumes the listing in another."""
    url = env.gw.catalog_url("namespaces")
    first = env.reader.get(url, params={"pageSize": "1", "pageToken": ""}, timeout=HTTP_TIMEOUT)
    token = first.json()["next-page-token"]
    env.gw.process.restart()
    with env.gw.session(env.reader_key) as reader:  # new connections to the new process
        rest, _ = _walk(reader, url, "namespaces", first_token=token)
    assert first.json()["namespaces"] + rest == [[name] for name in VISIBLE]


def test_dropped_listing_pages_with_sealed_tokens(env: Env) -> None:
    gw = env.gw
    for table in ("d1", "d2"):
        created = gw.admin.post(
            gw.catalog_url("namespaces/zulu/tables"),
            json={"name": table, "schema": SCHEMA},
            timeout=HTTP_TIMEOUT,
        )
        assert created.status_code == 200, created.text
        assert (
            gw.admin.delete(
                gw.catalog_url(f"namespaces/zulu/tables/{table}"), timeout=HTTP_TIMEOUT
            ).status_code
            == 204
        )
    url = f"{gw.url}/admin/v1/warehouses/default/dropped"
    dropped, tokens = _walk(gw.admin, url, "dropped")
    assert sorted(item["name"] for item in dropped) == ["d1", "d2"]
    assert tokens
    assert all(item["drop-id"].encode() not in _decoded(tokens[0]) for item in dropped)
    answer = gw.admin.get(
        gw.catalog_url("namespaces"), params={"pageSize": "1", "pageToken": tokens[0]}, timeout=HTTP_TIMEOUT
    )
    assert_error(answer, 400, "BadRequestException")
