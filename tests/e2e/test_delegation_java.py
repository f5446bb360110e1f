"""Each Trino user a principal: Iceberg's Java REST client driven as Trino drives it with
`iceberg.rest-catalog.session=USER`, against a real gateway process.

`tests/delegation/src/TrinoSessionDriver.java` (compiled once like the compatibility kit,
`tests.support.rck.build`) opens one `RESTSessionCatalog` with the engine's credential and, per
Trino user, a `SessionContext` built exactly as Trino 476's `TrinoRestCatalog.convert` builds it
(session id `user-source`, the user's properties, an unsigned JWT under `...:token-type:jwt` plus
the session's extra credentials). Iceberg's `OAuth2Manager` does the rest: the RFC 8693 exchange
with the engine's token as actor, once per session, and the refresh by exchanging again. So the
exchange is covered end to end where Trino itself is absent.

Controls: a listed analyst reads (also after a refused old subject, with a fresh one); a signed
OIDC subject reads with its issuer's groups; the session's token is refreshed by re-exchange.
Attacks: a listed user without a grant, a user outside the directory, an engine the policies do
not allow, a replayed old subject, a forged signed subject, a read a `context.via` policy forbids,
and the engine's key revoked mid-session. (A subject without an actor cannot be sent by this
client to a gateway that refuses unauthenticated requests: it stops at the configuration request;
tests/gateway/web/test_delegation.py sends that form raw.)
"""

from __future__ import annotations

import subprocess
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest
import requests

from tests.support import rck
from tests.support.audit import audit_log
from tests.support.gateway import GatewayProcess, bundled_policies
from tests.support.idp import Oauth2MockServer

DRIVER_SOURCES = Path(__file__).resolve().parents[1] / "delegation" / "src"
DRIVER_BUILD = DRIVER_SOURCES.parent / ".build"
TIMEOUT = 30
AUDIENCE = "cedarberg-delegation"
ID_TOKEN = "urn:ietf:params:oauth:token-type:id_token"
SCHEMA = {
    "type": "struct",
    "schema-id": 0,
    "fields": [{"id": 1, "name": "id", "type": "long", "required": False}],
}


def policies(issuer: str) -> str:
    return f"""
@id("trino-acts-for-directory-users")
permit (principal == Cedarberg::Service::"key:trino", action == Cedarberg::Action::"actAs", resource)
when {{
  context.subject_issuer == "unsigned" && context has trino_catalog && context.trino_catalog == "lake"
}};

@id("trino-acts-for-corp-users")
permit (principal == Cedarberg::Service::"key:trino", action == Cedarberg::Action::"actAs", resource)
when {{ context.subject_issuer == "{issuer}" }};

// Engines may read the catalog's configuration with their own credential; nothing more.
@id("engines-get-config")
permit (principal in Cedarberg::Group::"engines", action == Cedarberg::Action::"getConfig", resource);

@id("no-hr-through-trino")
forbid (principal, action, resource in Cedarberg::Namespace::"default/hr")
when {{ context has via && context.via == "key:trino" }};
"""


@pytest.fixture(scope="module")
def driver() -> Path:
    return rck.build(DRIVER_SOURCES, DRIVER_BUILD)


@pytest.fixture(scope="module")
def idp() -> Iterator[Oauth2MockServer]:
    server = Oauth2MockServer()
    server.start()
    yield server
    server.close()


@pytest.fixture(scope="module")
def gateway(idp: Oauth2MockServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    root = tmp_path_factory.mktemp("delegation-java")
    policy_dir = bundled_policies(root / "policies", {"delegation.cedar": policies(idp.issuer)})
    config = {
        "authz": {"policy_dir": str(policy_dir)},
        "audit": {"destination": str(root / "audit.jsonl")},
        # Short-lived tokens, so that a session outlives its first token and must refresh.
        "tokens": {"ttl_seconds": 60},
        "oidc": {
            "issuers": [
                {
                    "issuer": idp.issuer,
                    "audiences": [AUDIENCE],
                    "alias": "corp",
                    "groups_allowed": ["analysts"],
                }
            ]
        },
    }
    with GatewayProcess(root / "gw", config=config) as gw:  # the anonymous test admin sets up
        for namespace in ("sales", "hr"):
            _admin(
                gw,
                "POST",
                "/v1/namespaces",
                {"namespace": [namespace], "properties": {"cedarberg.readers": "analysts"}},
            )
            _admin(gw, "POST", f"/v1/namespaces/{namespace}/tables", {"name": "orders", "schema": SCHEMA})
        for user, groups in {"alice": ["analysts"], "bob": ["interns"]}.items():
            _admin(gw, "PUT", f"/admin/v1/users/{user}", {"groups": groups})
        yield gw


def _admin(gw: GatewayProcess, method: str, path: str, body: object = None) -> requests.Response:
    answer = requests.request(method, f"{gw.url}{path}", json=body, timeout=TIMEOUT)
    assert answer.status_code < 300, answer.text
    return answer


def _key(gw: GatewayProcess, principal: str) -> tuple[str, str]:
    """A new service key: (key id, the `id:secret` credential Trino is configured with)."""
    body = _admin(
        gw, "POST", "/admin/v1/api-keys", {"principal": principal, "kind": "service", "groups": ["engines"]}
    ).json()
    key = str(body["key"])
    return str(body["id"]), f"{key[4:20]}:{key[21:]}"


def _run(driver: Path, gw: GatewayProcess, steps: Sequence[str], between: str | None = None) -> list[str]:
    """The driver's output lines; at its `wait` step, `between` (a key id) is revoked first."""
    class_path = ":".join(str(p) for p in [driver, *rck.library_class_path()])
    with subprocess.Popen(
        ["java", "-Xmx256m", "-cp", class_path, "TrinoSessionDriver", gw.url, *steps],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    ) as process:
        assert process.stdin is not None
        assert process.stdout is not None
        lines = []
        for line in process.stdout:
            lines.append(line.strip())
            if line.strip() == "WAITING":
                if between is not None:
                    _admin(gw, "DELETE", f"/admin/v1/api-keys/{between}")
                process.stdin.write("go\n")
                process.stdin.flush()
        assert process.wait(timeout=180) == 0
    return [line for line in lines if line.startswith(("OK ", "ERR "))]


def _outcome(lines: list[str], step: str) -> list[str]:
    return [line for line in lines if line.split(" ", 2)[1] == step]


def _audit(gw: GatewayProcess) -> list[dict[str, object]]:
    assert gw.config is not None
    return audit_log(Path(gw.config["audit"]["destination"]))


def test_two_trino_users_on_one_catalog_each_decided_as_themselves(
    driver: Path, gateway: GatewayProcess
) -> None:
    _key_id, credential = _key(gateway, "trino")
    lines = _run(
        driver,
        gateway,
        [f"credential={credential}", "user=alice", "load=sales.orders", "list=sales", "load=hr.orders",
         "user=bob", "load=sales.orders", "user=carol", "load=sales.orders"],
    )  # fmt: skip
    alice_sales, alice_list, alice_hr, bob_sales, carol_sales = (
        lines[2], lines[3], lines[4], lines[6], lines[8]
    )  # fmt: skip
    assert alice_sales == "OK load=sales.orders true", lines
    assert alice_list.startswith("OK list=sales [sales.orders]"), lines
    assert alice_hr.startswith("ERR load=hr.orders NoSuchTableException"), lines  # context.via forbids
    assert bob_sales.startswith("ERR load=sales.orders NoSuchTableException"), lines  # no grant
    assert carol_sales.startswith("ERR load=sales.orders"), lines  # not in the directory
    assert "the actor may not act for this user" in carol_sales
    records = _audit(gateway)
    acts = [(r["principal"], r["resource"], r["decision"]) for r in records if r["action"] == "actAs"]
    assert ("key:trino", 'Cedarberg::User::"user:alice"', "allow") in acts
    assert ("key:trino", 'Cedarberg::User::"user:carol"', "deny") in acts
    reads = {(r["principal"], r["actor"], r["decision"]) for r in records if r["action"] == "loadTable"}
    assert ("user:alice", "key:trino", "allow") in reads
    assert ("user:bob", "key:trino", "deny") in reads


def test_an_engine_the_policies_do_not_allow_cannot_act_for_anyone(
    driver: Path, gateway: GatewayProcess
) -> None:
    _key_id, credential = _key(gateway, "spark")
    lines = _run(driver, gateway, [f"credential={credential}", "user=alice", "load=sales.orders"])
    assert lines[-1].startswith("ERR load=sales.orders"), lines
    assert "unauthorized_client" in lines[-1]
    assert "the actor may not act for this user" in lines[-1]


def test_a_replayed_old_subject_is_refused_as_expired(driver: Path, gateway: GatewayProcess) -> None:
    _key_id, credential = _key(gateway, "trino")
    lines = _run(
        driver,
        gateway,
        [f"credential={credential}", "backdate=3600", "user=alice", "load=sales.orders",
         "backdate=0", "user=alice", "load=sales.orders"],
    )  # fmt: skip
    old, fresh = _outcome(lines, "load=sales.orders")
    assert old.startswith("ERR load=sales.orders"), lines
    assert "subject_token has expired (too old)" in old
    assert fresh == "OK load=sales.orders true", lines  # a new session builds a fresh subject


def test_a_signed_oidc_subject_is_verified_and_reads_with_its_issuers_groups(
    driver: Path, gateway: GatewayProcess, idp: Oauth2MockServer
) -> None:
    _key_id, credential = _key(gateway, "trino")
    signed = idp.client_credentials("dave", AUDIENCE, groups="analysts")
    forged = signed[: signed.rindex(".") + 1] + "AAAA"
    lines = _run(
        driver,
        gateway,
        [f"credential={credential}", "user=dave", f"extra={ID_TOKEN}={signed}", "load=sales.orders",
         "user=eve", f"extra={ID_TOKEN}={forged}", "load=sales.orders"],
    )  # fmt: skip
    assert _outcome(lines, "load=sales.orders")[0] == "OK load=sales.orders true", lines
    assert "subject_token is not valid" in _outcome(lines, "load=sales.orders")[1], lines
    acts = [(r["resource"], r["decision"]) for r in _audit(gateway) if r["action"] == "actAs"]
    assert ('Cedarberg::User::"oidc:corp/dave"', "allow") in acts


def test_a_session_is_refreshed_by_re_exchange_and_cut_off_when_the_engine_key_is_revoked(
    driver: Path, gateway: GatewayProcess
) -> None:
    key_id, credential = _key(gateway, "trino")
    lines = _run(
        driver,
        gateway,
        [f"credential={credential}", "user=alice", "load=sales.orders", "sleep=70", "load=sales.orders",
         "wait", "load=sales.orders"],
        between=key_id,
    )  # fmt: skip
    loads = _outcome(lines, "load=sales.orders")
    assert loads[0] == loads[1] == "OK load=sales.orders true", lines  # the second after a refresh
    assert loads[2].startswith("ERR load=sales.orders NotAuthorizedException"), lines
    refreshes = [
        r
        for r in _audit(gateway)
        if r["action"] == "actAs" and r["detail"] == {"refresh": True, "subject_issuer": "unsigned"}
    ]
    assert refreshes
    assert all(r["decision"] == "allow" for r in refreshes)
