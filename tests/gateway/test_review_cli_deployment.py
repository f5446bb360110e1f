"""`cedarberg policies review` on a gateway host: with the deployment's settings it gives the answer
`GET /admin/v1/review` gives, and each principal it lists is one the gateway lets in.

One real gateway process for the module (SQLite under a data dir named `.cedarberg`, bundled
policies, an anonymous principal in group `bi`, an OIDC issuer nobody can enumerate); its keys are
real keys made with `cedarberg keys create` (one revoked with `cedarberg keys revoke`); the namespace,
its grants and its table are made through the gateway. The CLI runs as a subprocess beside it,
reading the same store, with `CEDARBERG_*` variables removed unless a test sets one.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
import requests

from tests.support.gateway import REPO_ROOT, GatewayProcess
from tests.support.secure import GENEROUS_RATE_LIMITS, keys_create, split_key

TIMEOUT = 30
REVIEW = "/admin/v1/review"
NS = "audited"
TABLE = f"default/{NS}/orders"
SCHEMA = {"type": "struct", "fields": [{"id": 1, "name": "a", "type": "int", "required": False}]}
# An issuer whose keys cannot be fetched: the gateway logs that and serves; the review must still
# say that its subjects exist and cannot be listed.
ISSUER = {
    "issuer": "https://idp.audited.test",
    "audiences": ["cedarberg"],
    "jwks_uri": "https://127.0.0.1:9/jwks.json",
    "alias": "corp",
    "groups_allowed": ["bi"],
    "privileged_groups_allowed": ["monitoring"],
}


@dataclass(frozen=True)
class Deployment:
    gateway: GatewayProcess
    keys: dict[str, str]
    home: Path  # the directory holding `.cedarberg` (the data dir) and its config file

    def call(self, key: str | None, method: str, path: str, **kwargs: Any) -> requests.Response:
        headers = {} if key is None else {"Authorization": f"Bearer {key}"}
        url = f"{self.gateway.url}{path}"
        return requests.request(method, url, headers=headers, timeout=TIMEOUT, **kwargs)

    def endpoint(self, **params: Any) -> dict[str, Any]:
        response = self.call(self.keys["root"], "GET", REVIEW, params=params)
        assert response.status_code == 200, response.text
        body: dict[str, Any] = response.json()
        return body

    def settings(self) -> list[str]:
        return [
            "--data-dir",
            str(self.gateway.data_dir),
            "--config",
            str(self.gateway.config_path),
            *self.store(),
        ]

    def store(self) -> list[str]:
        """`--store-url` of a deployment on PostgreSQL (on SQLite the data directory names the store)."""
        return ["--store-url", self.gateway.store_url] if self.gateway.store_url else []

    def environ(self, **extra: str) -> dict[str, str]:
        """`_environ(extra)`, naming the store of a deployment on PostgreSQL as an operator would."""
        store = {"CEDARBERG_STORE_URL": self.gateway.store_url} if self.gateway.store_url else {}
        return _environ(**store, **extra)


def _environ(**extra: str) -> dict[str, str]:
    """The environment without any `CEDARBERG_*` variable, plus `extra`."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CEDARBERG_")}
    return {**clean, **extra}


def review_cli(
    *args: str, cwd: Path = REPO_ROOT, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "cedarberg.gateway.cli", "policies", "review", *args]
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=120, check=False, cwd=cwd, env=dict(env or _environ())
    )


def review_json(*args: str, cwd: Path = REPO_ROOT, env: Mapping[str, str] | None = None) -> dict[str, Any]:
    run = review_cli(*args, "--json", cwd=cwd, env=env)
    assert run.returncode == 0, run.stderr
    document: dict[str, Any] = orjson.loads(run.stdout)
    return document


@pytest.fixture(scope="module")
def deployment(
    tmp_path_factory: pytest.TempPathFactory, module_store_url: str | None
) -> Iterator[Deployment]:
    home = tmp_path_factory.mktemp("review-host")
    data_dir = home / ".cedarberg"
    keys = {
        "root": keys_create(data_dir, "root", ["admins"], store_url=module_store_url),
        "bea": keys_create(data_dir, "bea", ["bi"], store_url=module_store_url),
        "erin": keys_create(data_dir, "erin", ["etl"], store_url=module_store_url),
        "zed": keys_create(data_dir, "zed", ["sales"], store_url=module_store_url),
        "rex": keys_create(data_dir, "rex", ["etl"], store_url=module_store_url),
    }
    revoke = subprocess.run(
        [
            sys.executable, "-m", "cedarberg.gateway.cli", "keys", "revoke",
            split_key(keys["rex"])[0], "--data-dir", str(data_dir),
            *(["--store-url", module_store_url] if module_store_url else []),
        ],
        capture_output=True, text=True, timeout=120, check=False, cwd=REPO_ROOT, env=_environ(),
    )  # fmt: skip
    assert revoke.returncode == 0, revoke.stderr
    gateway = GatewayProcess(
        data_dir,
        store_url=module_store_url,
        config={
            "rate_limits": dict(GENEROUS_RATE_LIMITS),
            "anonymous": {"principal": "guest", "groups": ["bi"]},
            "oidc": {"issuers": [ISSUER]},
        },
        anonymous=False,
        probe_headers={"Authorization": f"Bearer {keys['root']}"},
    )
    gateway.start()
    try:
        world = Deployment(gateway, keys, home)
        grants = {"cedarberg.readers": "bi", "cedarberg.writers": "etl"}
        made = world.call(
            keys["root"], "POST", "/v1/namespaces", json={"namespace": [NS], "properties": grants}
        )
        assert made.status_code == 200, made.text
        table = {"name": "orders", "schema": SCHEMA}
        created = world.call(keys["root"], "POST", f"/v1/namespaces/{NS}/tables", json=table)
        assert created.status_code == 200, created.text
        yield world
    finally:
        gateway.stop()


def _ids(action: Mapping[str, Any]) -> set[str]:
    return {p["id"] for p in action["principals"]}


def _by_action(document: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    return {a["action"]: a for a in document["actions"]}


def test_the_cli_with_settings_answers_as_the_endpoint(deployment: Deployment) -> None:
    for resource in (TABLE, f"default/{NS}", "default"):
        endpoint = deployment.endpoint(resource=resource)
        cli = review_json("--resource", resource, *deployment.settings())
        # Same principals, groups, policy ids, restrictions, residuals, version, issuers.
        assert cli == endpoint, resource
        for action in cli["actions"]:  # in a fixed order, whichever process decided
            assert all(p["policy_ids"] == sorted(p["policy_ids"]) for p in action["principals"])
    load = _by_action(review_json("--resource", TABLE, "--action", "loadTable", *deployment.settings()))
    (action,) = load.values()
    assert _ids(action) == {"key:root", "key:bea", "key:erin", "anonymous:guest"}
    sources = {p["id"]: p["source"] for p in action["principals"]}
    assert sources["key:bea"] == "api-key"
    assert sources["anonymous:guest"] == "anonymous"
    # The revoked key's principal is not someone who may read.
    assert "key:rex" not in _ids(action)
    conditions = {c["policy_id"]: c["condition"] for c in action["conditions"]}
    assert conditions["readers-read-granted"] == 'when { (principal.groups).containsAny(["bi"]) }'


def test_the_issuers_that_cannot_be_listed_are_named(deployment: Deployment) -> None:
    document = review_json("--resource", TABLE, *deployment.settings())
    (issuer,) = document["not_enumerated"]
    assert issuer["principals"] == "oidc:corp/*"
    # What the issuer may assert: every group scoped to it, and bare only what it is allowed.
    assert (issuer["groups"], issuer["bare_groups"], issuer["privileged_groups"]) == (
        "corp/*",
        ["bi"],
        ["monitoring"],
    )
    text = review_cli("--resource", TABLE, "--action", "loadTable", *deployment.settings())
    assert text.returncode == 0, text.stderr
    assert "known principals: the deployment's" in text.stdout
    assert "not listed: oidc:corp/*" in text.stdout
    assert "their groups: corp/*; bare: monitoring, bi" in text.stdout
    assert "key:bea (api-key; groups bi): readers-read-granted" in text.stdout


def test_every_principal_the_cli_lists_is_let_in_and_no_other(deployment: Deployment) -> None:
    actions = _by_action(
        review_json(
            "--resource", TABLE, "--action", "loadTable", "--action", "updateTable", *deployment.settings()
        )
    )
    load, update = _ids(actions["loadTable"]), _ids(actions["updateTable"])
    callers: dict[str, str | None] = {f"key:{name}": key for name, key in deployment.keys.items()}
    callers["anonymous:guest"] = None  # no credentials: the configured anonymous principal
    for principal, key in callers.items():
        loaded = deployment.call(key, "GET", f"/v1/namespaces/{NS}/tables/orders")
        assert (loaded.status_code == 200) == (principal in load), (principal, loaded.status_code)
        commit = deployment.call(key, "POST", f"/v1/namespaces/{NS}/tables/orders", json={"updates": []})
        assert (commit.status_code == 200) == (principal in update), (principal, commit.status_code)


def test_stated_subjects_and_properties_add_to_the_deployment(deployment: Deployment) -> None:
    document = review_json(
        "--resource", TABLE, "--action", "loadTable", "--subject", "key:newcomer=sales",
        "--property", f"{NS}:cedarberg.readers=sales", *deployment.settings(),
    )  # fmt: skip
    (action,) = document["actions"]
    sources = {p["id"]: p["source"] for p in action["principals"]}
    # The stated reader group replaces the registry's (bi): zed (sales) reads, bea and the guest
    # (bi) do not; the writers grant (etl) stays the registry's; the stated subject is decided too.
    assert sources == {
        "key:root": "api-key",
        "key:erin": "api-key",
        "key:zed": "api-key",
        "key:newcomer": "stated",
    }
    # The deployment itself is unchanged: the endpoint still answers with the registry's grants.
    endpoint = _by_action(deployment.endpoint(resource=TABLE, action="loadTable"))["loadTable"]
    assert "key:zed" not in _ids(endpoint)
    assert "key:bea" in _ids(endpoint)


def test_a_principal_review_with_settings_answers_as_the_endpoint(deployment: Deployment) -> None:
    cli = review_json("--principal", "key:bea", "--resource", f"default/{NS}", *deployment.settings())
    assert cli == deployment.endpoint(principal="key:bea", resource=f"default/{NS}")
    assert cli["groups"] == ["bi"]
    assert cli["groups_from"] == "api-key"
    objects = {o["resource"]: o for o in cli["objects"]}
    assert f'Cedarberg::Table::"{TABLE}"' in objects  # listed from the registry, not named


def test_settings_are_found_as_keys_list_finds_them(deployment: Deployment, tmp_path: Path) -> None:
    # No flag: the default ./.cedarberg of the working directory, as `cedarberg keys list` uses it.
    found = review_json(
        "--resource", TABLE, "--action", "loadTable", cwd=deployment.home, env=deployment.environ()
    )
    (action,) = found["actions"]
    assert {"key:root", "key:bea", "key:erin"} <= _ids(action)
    # A CEDARBERG_* variable names the settings too, from any directory.
    env = deployment.environ(CEDARBERG_DATA_DIR=str(deployment.gateway.data_dir))
    named = review_json("--resource", TABLE, "--action", "loadTable", cwd=tmp_path, env=env)
    assert _ids(named["actions"][0]) == _ids(action)
    # --offline ignores the deployment found by default.
    offline = review_json("--resource", TABLE, "--action", "loadTable", "--offline", cwd=deployment.home)
    assert _ids(offline["actions"][0]) == set()
    assert "not_enumerated" not in offline


def test_without_settings_the_review_is_offline_as_before(tmp_path: Path) -> None:
    document = review_json(
        "--resource", TABLE, "--action", "loadTable", "--subject", "key:bea=bi",
        "--property", f"{NS}:cedarberg.readers=bi", cwd=tmp_path,
    )  # fmt: skip
    (action,) = document["actions"]
    assert [(p["id"], p["source"]) for p in action["principals"]] == [("key:bea", "stated")]
    assert "not_enumerated" not in document
    assert list(tmp_path.iterdir()) == []  # no store was created to look for principals


def test_a_deployment_that_cannot_be_read_is_an_error_not_an_empty_answer(
    deployment: Deployment, tmp_path: Path
) -> None:
    empty = tmp_path / "nothing-here"
    missing_store = review_cli("--resource", TABLE, "--data-dir", str(empty))
    assert missing_store.returncode == 1
    assert "cedarberg db upgrade" in missing_store.stderr
    assert not empty.exists()  # the review never creates a registry
    missing_table = review_cli("--resource", f"default/{NS}/nothing", *deployment.settings())
    assert missing_table.returncode == 1
    assert "does not exist" in missing_table.stderr
    both = review_cli("--resource", TABLE, "--offline", *deployment.settings())
    assert both.returncode == 2
    assert "--offline" in both.stderr
    wrong = review_cli("--resource", TABLE, "--action", "loadView", *deployment.settings())
    assert wrong.returncode == 2
    assert "loadView" in wrong.stderr
