"""What is checked is what is interpreted: a request that two parsers could read differently (a
JSON body with a repeated key, a repeated query parameter the gateway reads, a repeated form field)
is a 400 and changes nothing; the ordinary spellings of the same requests still work."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.gateway.web.conftest import SCHEMA, InProcessGateway

ROOT = Path(__file__).resolve().parents[3]
TABLE = "/v1/namespaces/ns/tables/t"
JSON = {"Content-Type": "application/json"}


async def _metadata(gw: InProcessGateway) -> dict[str, Any]:
    answer = await gw.client.get(TABLE)
    assert answer.status == 200, await answer.text()
    document: dict[str, Any] = await answer.json()
    return document


async def _bad_request(gw: InProcessGateway, method: str, path: str, body: bytes, field: str) -> None:
    answer = await gw.client.request(method, path, data=body, headers=JSON)
    assert answer.status == 400, await answer.text()
    error = (await answer.json())["error"]
    assert error["type"] == "BadRequestException"
    assert error["code"] == 400
    assert error["message"] == f"request body is not valid JSON: duplicate field '{field}'"


_BENIGN = b'[{"action":"set-properties","updates":{"comment":"nightly"}}]'
_HIDDEN = b'[{"action":"set-location","location":"file:///elsewhere/t"}]'


@pytest.mark.parametrize(
    ("body", "field"),
    [
        # One parser applies the benign updates, another the hidden ones.
        (b'{"requirements":[],"updates":' + _BENIGN + b',"updates":' + _HIDDEN + b"}", "updates"),
        (b'{"requirements":[],"updates":' + _HIDDEN + b',"\\u0075pdates":' + _BENIGN + b"}", "updates"),
        # Two actions in one update: a property change to one reader, a relocation to another.
        (
            b'{"updates":[{"action":"set-properties","updates":{},"action":"set-location",'
            b'"location":"file:///elsewhere/t"}]}',
            "action",
        ),
        (b'{"updates":[{"action":"set-properties","updates":{"a":"1","a":"2"}}]}', "a"),
    ],
)
async def test_a_commit_with_a_repeated_key_is_refused_and_changes_nothing(
    gw: InProcessGateway, body: bytes, field: str
) -> None:
    await gw.create_namespace("ns")
    await gw.create_table("ns", "t")
    before = await _metadata(gw)
    await _bad_request(gw, "POST", TABLE, body, field)
    assert await _metadata(gw) == before


async def test_a_create_with_two_locations_is_refused_and_creates_nothing(gw: InProcessGateway) -> None:
    await gw.create_namespace("ns")
    schema = orjson.dumps(SCHEMA)
    body = b'{"name":"t","schema":' + schema + b',"location":"file:///elsewhere/t","location":"file:///x/t"}'
    await _bad_request(gw, "POST", "/v1/namespaces/ns/tables", body, "location")
    assert (await gw.client.get(TABLE)).status == 404
    names = (await (await gw.client.get("/v1/namespaces/ns/tables")).json())["identifiers"]
    assert names == []


async def test_an_admin_body_with_a_repeated_key_is_refused(gw: InProcessGateway) -> None:
    body = b'{"principal":"svc-reader","groups":["bi"],"groups":["admins"]}'
    await _bad_request(gw, "POST", "/admin/v1/api-keys", body, "groups")
    listed = await (await gw.client.get("/admin/v1/api-keys", params={"principal": "svc-reader"})).json()
    assert listed["api-keys"] == []


async def test_ordinary_bodies_still_parse(gw: InProcessGateway) -> None:
    """Control: colons and escapes inside strings, one key in many objects, nesting."""
    await gw.create_namespace("ns")
    await gw.create_table("ns", "t")
    body = (
        b'{"requirements":[],"updates":[{"action":"set-properties","updates":'
        b'{"comment":"a: b \\u003a c","url":"s3://x/y","note":"\\"quoted\\" \\u00e9"}},'
        b'{"action":"set-properties","updates":{"comment2":"{\\"k\\":1,\\"k\\":2}"}}]}'
    )
    answer = await gw.client.post(TABLE, data=body, headers=JSON)
    assert answer.status == 200, await answer.text()
    properties = (await _metadata(gw))["metadata"]["properties"]
    assert properties["comment"] == "a: b : c"
    assert properties["url"] == "s3://x/y"
    assert properties["note"] == '"quoted" \u00e9'
    assert properties["comment2"] == '{"k":1,"k":2}'


@pytest.mark.parametrize(
    ("path", "name"),
    [
        ("/v1/config?warehouse=default&warehouse=other", "warehouse"),
        ("/v1/namespaces?parent=ns&parent=hidden", "parent"),
        ("/v1/namespaces?pageToken=&pageToken=x", "pageToken"),
        ("/v1/namespaces?pageSize=1&pageSize=1000", "pageSize"),
        ("/v1/namespaces/ns/tables?pageSize=1&pageSize=2", "pageSize"),
        (TABLE + "?snapshots=refs&snapshots=all", "snapshots"),
        ("/admin/v1/api-keys?principal=root&principal=ana", "principal"),
    ],
)
async def test_a_repeated_query_parameter_the_gateway_reads_is_refused(
    gw: InProcessGateway, path: str, name: str
) -> None:
    await gw.create_namespace("ns")
    await gw.create_table("ns", "t")
    answer = await gw.client.get(path)
    assert answer.status == 400, await answer.text()
    error = (await answer.json())["error"]
    assert error["type"] == "BadRequestException"
    assert error["message"] == f"query parameter '{name}' is repeated"


async def test_a_repeated_purge_flag_is_refused_and_drops_nothing(gw: InProcessGateway) -> None:
    await gw.create_namespace("ns")
    await gw.create_table("ns", "t")
    answer = await gw.client.delete(TABLE + "?purgeRequested=false&purgeRequested=true")
    assert answer.status == 400, await answer.text()
    assert (await answer.json())["error"]["message"] == "query parameter 'purgeRequested' is repeated"
    assert (await gw.client.get(TABLE)).status == 200


async def test_single_query_parameters_still_work(gw: InProcessGateway) -> None:
    """Control: each parameter once (an empty pageToken included), and unknown ones ignored."""
    await gw.create_namespace("ns")
    await gw.create_table("ns", "t")
    assert (await gw.client.get("/v1/config?warehouse=default")).status == 200
    listed = await gw.client.get("/v1/namespaces?pageToken=&pageSize=10&other=1&other=2")
    assert listed.status == 200, await listed.text()
    assert ["ns"] in (await listed.json())["namespaces"]
    refs = await gw.client.get(TABLE + "?snapshots=refs")
    assert refs.status == 200, await refs.text()


async def test_a_repeated_token_form_field_is_refused(gw: InProcessGateway) -> None:
    # Which client would be authenticated, the first or the last? Neither.
    form = "grant_type=client_credentials&client_id=ana&client_id=root&client_secret=s"
    answer = await gw.client.post(
        "/v1/oauth/tokens", data=form, headers={"Content-Type": "application/x-www-form-urlencoded"}
    )
    assert answer.status == 400, await answer.text()
    refused = await answer.json()
    assert refused == {"error": "invalid_request", "error_description": "a parameter is repeated"}


def test_the_gateway_reads_query_parameters_only_through_query_value() -> None:
    """The rule holds for routes written later: `request.query.get` (first of many) appears nowhere
    but in `http.query_value`; multi-valued parameters use `getall` on purpose."""
    single_value_reads = re.compile(r"\.query\.get\(|\.query\[|\.query\.items\(\)\[|rel_url\.query\b")
    offenders = [
        str(path.relative_to(ROOT))
        for path in (ROOT / "gateway").rglob("*.py")
        if single_value_reads.search(path.read_text())
    ]
    assert offenders == []
    assert "values = query.getall(name, ())" in (ROOT / "gateway/web/http.py").read_text()  # one_value
