"""Issue 29 part 1 on a real gateway: a restriction that cannot bind is flagged by every tool.

One gateway process (SQLite, the embedded `file://` warehouse, authentication required) runs the
bundled policies plus `analysts-finance-no-ssn`, an `@columns` permit without `ssn` for group
`analysts` on `default/finance`. The namespace is created with `cedarberg.readers = analysts`, so
the grant lifts the restriction: analyst ana plans a scan of `ssn` and the gateway allows it.
The admin review and explain endpoints, `cedarberg policies review` with the deployment's settings,
`cedarberg policies explain` (real subprocesses) and the gateway's own log all say so, naming both
policies. Once the grant is removed the gateway refuses that plan and the lifted finding goes,
while the finding that the local warehouse lets engines read the files directly remains.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
import requests

from cedarberg.gateway.config.authz import BUNDLED_POLICY_DIR
from tests.gateway.test_restriction_binding import FINANCE_PERMIT, GRANT, RESTRICTED
from tests.support.cli import clean_environ, run_cedarberg
from tests.support.gateway import GatewayProcess
from tests.support.secure import GENEROUS_RATE_LIMITS, keys_create

TIMEOUT = 30
TABLE = "default/finance/accounts"
TABLE_UID = f'Cedarberg::Table::"{TABLE}"'
SCHEMA = {
    "type": "struct",
    "fields": [
        {"id": 1, "name": "id", "type": "long", "required": False},
        {"id": 2, "name": "name", "type": "string", "required": False},
        {"id": 3, "name": "amount", "type": "double", "required": False},
        {"id": 4, "name": "ssn", "type": "string", "required": False},
    ],
}


@dataclass(frozen=True)
class Finance:
    gateway: GatewayProcess
    keys: dict[str, str]
    policy_dir: Path

    def call(self, who: str, method: str, path: str, **kwargs: Any) -> requests.Response:
        headers = {"Authorization": f"Bearer {self.keys[who]}"}
        url = f"{self.gateway.url}{path}"
        return requests.request(method, url, headers=headers, timeout=TIMEOUT, **kwargs)

    def review(self) -> dict[str, Any]:
        response = self.call("root", "GET", "/admin/v1/review", params={"resource": TABLE})
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def plan_ssn(self) -> requests.Response:
        path = "/v1/namespaces/finance/tables/accounts/plan"
        return self.call("ana", "POST", path, json={"select": ["id", "ssn"]})

    def cli(self, *args: str, env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess[str]:
        return run_cedarberg(*args, cwd=self.policy_dir.parent, env=clean_environ(**(env or {})))

    def settings(self) -> list[str]:
        settings = ["--data-dir", str(self.gateway.data_dir), "--config", str(self.gateway.config_path)]
        # On PostgreSQL the data directory does not name the store: the flag does, as for serve.
        return [*settings, "--store-url", self.gateway.store_url] if self.gateway.store_url else settings


@pytest.fixture(scope="module")
def finance(tmp_path_factory: pytest.TempPathFactory, module_store_url: str | None) -> Iterator[Finance]:
    home = tmp_path_factory.mktemp("binding")
    policy_dir = home / "policies"
    shutil.copytree(BUNDLED_POLICY_DIR, policy_dir, ignore=shutil.ignore_patterns("tests", "*.md"))
    (policy_dir / "finance.cedar").write_text(FINANCE_PERMIT)
    data_dir = home / "gateway"
    keys = {
        "root": keys_create(data_dir, "root", ["admins"], store_url=module_store_url),
        "ana": keys_create(data_dir, "ana", ["analysts"], store_url=module_store_url),
    }
    gateway = GatewayProcess(
        data_dir,
        store_url=module_store_url,
        config={"rate_limits": dict(GENEROUS_RATE_LIMITS), "authz": {"policy_dir": str(policy_dir)}},
        anonymous=False,
        probe_headers={"Authorization": f"Bearer {keys['root']}"},
    )
    gateway.start()
    try:
        world = Finance(gateway, keys, policy_dir)
        namespace = {"namespace": ["finance"], "properties": {"cedarberg.readers": "analysts"}}
        made = world.call("root", "POST", "/v1/namespaces", json=namespace)
        assert made.status_code == 200, made.text
        table = {"name": "accounts", "schema": SCHEMA}
        created = world.call("root", "POST", "/v1/namespaces/finance/tables", json=table)
        assert created.status_code == 200, created.text
        yield world
    finally:
        gateway.stop()


def _store_environ(finance: Finance) -> dict[str, str]:
    """The variable naming the store of a deployment on PostgreSQL (none on SQLite)."""
    return {"CEDARBERG_STORE_URL": finance.gateway.store_url} if finance.gateway.store_url else {}


def _kinds(findings: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {f["kind"]: f for f in findings}


def test_1_the_grant_lifts_the_restriction_and_every_tool_names_both_policies(finance: Finance) -> None:
    # The attack: an analyst plans a scan of the column the restriction leaves out. The grant
    # lifts it, so the gateway allows it; what the tools say must match.
    assert finance.plan_ssn().status_code == 200

    review = finance.review()
    lifted = _kinds(review["restrictions_not_binding"])["lifted"]
    assert (lifted["policy_id"], lifted["lifted_by"]) == (RESTRICTED, [GRANT])
    assert lifted["resource"] == TABLE_UID
    assert {"key:ana", "members of analysts"} <= set(lifted["principals"])
    assert RESTRICTED in lifted["message"]
    assert GRANT in lifted["message"]

    # The command line with the deployment's settings answers as the endpoint, and says it in text.
    cli = finance.cli("policies", "review", "--resource", TABLE, "--json", *finance.settings())
    assert cli.returncode == 0, cli.stderr
    assert orjson.loads(cli.stdout)["restrictions_not_binding"] == review["restrictions_not_binding"]
    text = finance.cli("policies", "review", "--resource", TABLE, *finance.settings())
    assert text.returncode == 0, text.stderr
    assert f"restriction not binding: {lifted['message']}" in text.stdout

    # The review of the principal in the namespace says the same of the table.
    response = finance.call(
        "root", "GET", "/admin/v1/review", params={"principal": "key:ana", "resource": "default/finance"}
    )
    assert response.status_code == 200, response.text
    (of_ana,) = response.json()["restrictions_not_binding"]
    assert (of_ana["kind"], of_ana["policy_id"], of_ana["lifted_by"]) == ("lifted", RESTRICTED, [GRANT])
    assert (of_ana["principals"], of_ana["resource"]) == (["key:ana"], TABLE_UID)

    # The admin explain endpoint, on the registry's grants.
    body = {
        "principal": "key:ana",
        "groups": ["analysts"],
        "action": "planTableScan",
        "resource": {"type": "table", "namespace": ["finance"], "name": "accounts"},
    }
    explained = finance.call("root", "POST", "/admin/v1/explain", json=body)
    assert explained.status_code == 200, explained.text
    (finding,) = explained.json()["restrictions_not_binding"]
    assert (finding["kind"], finding["policy_id"], finding["lifted_by"]) == ("lifted", RESTRICTED, [GRANT])
    assert explained.json()["restrictions"] == []  # the gateway enforces none

    # `cedarberg policies explain`, with the grant stated.
    run = finance.cli(
        "policies", "explain", "--dir", str(finance.policy_dir), "--principal", "key:ana",
        "--group", "analysts", "--action", "planTableScan", "--resource", TABLE,
        "--property", "finance:cedarberg.readers=analysts",
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    line = next(x for x in run.stdout.splitlines() if x.startswith("restriction not binding:"))
    assert RESTRICTED in line
    assert GRANT in line


def test_2_the_loader_logged_what_the_policies_alone_say(finance: Finance) -> None:
    lines = [line for line in finance.gateway.log_text().splitlines() if "restriction not binding" in line]
    granted = [line for line in lines if "lifted-if-granted" in line or "wherever a namespace grant" in line]
    assert granted, lines
    assert RESTRICTED in granted[0]
    assert GRANT in granted[0]
    assert any("local directory" in line and str(finance.gateway.data_dir) in line for line in lines), lines


def test_3_without_the_grant_the_restriction_binds_the_plan_but_not_the_local_files(finance: Finance) -> None:
    removed = finance.call(
        "root",
        "POST",
        "/v1/namespaces/finance/properties",
        json={"removals": ["cedarberg.readers"], "updates": {}},
    )
    assert removed.status_code == 200, removed.text
    deadline = time.monotonic() + 15
    while finance.plan_ssn().status_code != 403:  # grants may be cached briefly
        assert time.monotonic() < deadline, "the removed grant still lifts the restriction"
        time.sleep(0.2)
    clear = finance.call(
        "ana", "POST", "/v1/namespaces/finance/tables/accounts/plan", json={"select": ["id", "amount"]}
    )
    assert clear.status_code == 200, clear.text  # control: what the restriction allows still works

    review = finance.review()
    kinds = _kinds(review["restrictions_not_binding"])
    assert "lifted" not in kinds
    local = kinds["local-warehouse"]
    assert local["policy_id"] == RESTRICTED
    assert local["location"] == (finance.gateway.data_dir / "warehouse").resolve().as_uri()
    assert "server-side scan planning" in local["binds_instead"]

    run = finance.cli(
        "policies", "explain", "--dir", str(finance.policy_dir), "--principal", "key:ana",
        "--group", "analysts", "--action", "planTableScan", "--resource", TABLE,
        env={"CEDARBERG_DATA_DIR": str(finance.gateway.data_dir), **_store_environ(finance)},
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    (line,) = [x for x in run.stdout.splitlines() if x.startswith("restriction not binding:")]
    assert "local directory" in line
    assert GRANT not in line


def test_4_on_an_s3_warehouse_trusted_to_no_client_the_restriction_binds(finance: Finance) -> None:
    # Control: the same permit, no grant, the deployment's warehouse an object store (a deployment
    # with no registry yet: --offline decides on the policies, with its warehouses).
    env = {"CEDARBERG_WAREHOUSES__DEFAULT__LOCATION": "s3://lake/warehouse"}
    run = finance.cli(
        "policies", "explain", "--dir", str(finance.policy_dir), "--principal", "key:ana",
        "--group", "analysts", "--action", "planTableScan", "--resource", TABLE, "--offline", env=env,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr
    assert f"restricted by {RESTRICTED}" in run.stdout
    assert "restriction not binding" not in run.stdout
    validated = finance.cli("policies", "validate", str(finance.policy_dir), env=env)
    assert validated.returncode == 0, validated.stderr
    # Only the standing caveat the loader reports: a grant naming analysts would lift it.
    warnings = [x for x in validated.stdout.splitlines() if x.startswith("warning: restriction not binding")]
    assert len(warnings) == 1
    assert "wherever a namespace grant" in warnings[0]
