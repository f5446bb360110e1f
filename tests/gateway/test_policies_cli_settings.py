"""`cedarberg policies validate|test|explain|review` read the deployment as `serve` does: the
policy directory of `--config` or `CEDARBERG_AUTHZ__POLICY_DIR`, and for `explain` the live grants
of the registry, so that what the tool answers is what the running gateway does.

One real gateway process for the module: SQLite under `HOME/.cedarberg`, its policies in a copy of
the bundled set plus one policy the bundled set does not have (`auditors-read`, with a request
fixture of its own), configured with `--config`. Its keys are made with `cedarberg keys create`; the
namespace and its reader grant are created through the gateway. Every CLI runs in a subprocess with
the `CEDARBERG_*` variables removed unless a test sets one.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from cedarberg.gateway.config.authz import BUNDLED_POLICY_DIR
from tests.support.cli import clean_environ, run_cedarberg
from tests.support.gateway import REPO_ROOT, GatewayProcess, bundled_policies
from tests.support.policies import validate_summary
from tests.support.ports import free_port
from tests.support.secure import GENEROUS_RATE_LIMITS, keys_create

TIMEOUT = 30
NS = "sales"
TABLE = f"default/{NS}/orders"
SCHEMA = {"type": "struct", "fields": [{"id": 1, "name": "a", "type": "int", "required": False}]}
AUDITORS = """
@id("auditors-read")
permit (
    principal in Cedarberg::Group::"auditors",
    action in [Cedarberg::Action::"readMetrics", Cedarberg::Action::"loadTable"],
    resource
);
"""
BUNDLED_SUMMARY = validate_summary(BUNDLED_POLICY_DIR)
# the deployment's directory: the bundled policies and AUDITORS in a file of its own
DEPLOYED_SUMMARY = validate_summary(BUNDLED_POLICY_DIR, extra_files=1, extra_policies=1)


def _fixture(principal: str, group: str) -> dict[str, object]:
    """A request fixture: `principal` of `group` reads the gateway's metrics."""
    user = {"type": "Cedarberg::User", "id": principal}
    catalog = {"type": "Cedarberg::Catalog", "id": "cedarberg"}
    return {
        "description": f"{group} read the metrics",
        "principal": user,
        "action": "readMetrics",
        "resource": catalog,
        "context": {},
        "entities": [
            {
                "uid": user,
                "attrs": {"groups": [group]},
                "parents": [{"type": "Cedarberg::Group", "id": group}],
                "tags": {},
            },
            {"uid": {"type": "Cedarberg::Group", "id": group}, "attrs": {}, "parents": []},
            {"uid": catalog, "attrs": {}, "parents": []},
        ],
        "determining_policies": ["auditors-read"],
    }


@dataclass(frozen=True)
class Deployment:
    gateway: GatewayProcess
    home: Path  # holds `.cedarberg` (the data dir), its config file and the policy directory
    policies: Path
    keys: dict[str, str]

    @property
    def config(self) -> Path:
        return self.gateway.config_path

    def settings(self) -> list[str]:
        return ["--config", str(self.config), "--data-dir", str(self.gateway.data_dir), *self.store()]

    def store(self) -> list[str]:
        """`--store-url` of a deployment on PostgreSQL (on SQLite the data directory names the store)."""
        return ["--store-url", self.gateway.store_url] if self.gateway.store_url else []

    def store_description(self) -> str:
        """How explain names the registry it read (no password here to hide)."""
        return self.gateway.store_url or f"sqlite:///{self.gateway.data_dir / 'catalog.db'}"

    def load_table(self, key: str) -> int:
        response = requests.get(
            f"{self.gateway.url}/v1/namespaces/{NS}/tables/orders",
            headers={"Authorization": f"Bearer {key}"},
            timeout=TIMEOUT,
        )
        return response.status_code


def explain(
    *args: str, cwd: Path = REPO_ROOT, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return run_cedarberg("policies", "explain", *args, cwd=cwd, env=env)


def reader(group: str, principal: str = "key:someone") -> list[str]:
    """The explain options of `principal` in `group` loading the table."""
    return ["--principal", principal, "--group", group, "--action", "loadTable", "--resource", TABLE]


@pytest.fixture(scope="module")
def deployment(
    tmp_path_factory: pytest.TempPathFactory, module_store_url: str | None
) -> Iterator[Deployment]:
    home = tmp_path_factory.mktemp("policy-host")
    policies = bundled_policies(home / "deployed-policies", {"auditors.cedar": AUDITORS})
    (policies / "tests" / "ALLOW").mkdir(parents=True)
    (policies / "tests" / "ALLOW" / "auditors-read-metrics.json").write_text(
        json.dumps(_fixture("key:audrey", "auditors"))
    )
    data_dir = home / ".cedarberg"
    keys = {
        "root": keys_create(data_dir, "root", ["admins"], store_url=module_store_url),
        "bea": keys_create(data_dir, "bea", ["bi"], store_url=module_store_url),
        "zed": keys_create(data_dir, "zed", ["finance"], store_url=module_store_url),
    }
    gateway = GatewayProcess(
        data_dir,
        store_url=module_store_url,
        config={"rate_limits": dict(GENEROUS_RATE_LIMITS), "authz": {"policy_dir": str(policies)}},
        anonymous=False,
        probe_headers={"Authorization": f"Bearer {keys['root']}"},
    )
    gateway.start()
    try:
        root = {"Authorization": f"Bearer {keys['root']}"}
        grant = {"namespace": [NS], "properties": {"cedarberg.readers": "bi"}}
        made = requests.post(f"{gateway.url}/v1/namespaces", json=grant, headers=root, timeout=TIMEOUT)
        assert made.status_code == 200, made.text
        table = {"name": "orders", "schema": SCHEMA}
        created = requests.post(
            f"{gateway.url}/v1/namespaces/{NS}/tables", json=table, headers=root, timeout=TIMEOUT
        )
        assert created.status_code == 200, created.text
        yield Deployment(gateway, home, policies, keys)
    finally:
        gateway.stop()


# -- the policy directory: --config and CEDARBERG_AUTHZ__POLICY_DIR, as serve ----------------------


def test_validate_and_test_use_the_configured_policy_directory(deployment: Deployment) -> None:
    validated = run_cedarberg("policies", "validate", "--config", str(deployment.config))
    assert validated.returncode == 0, validated.stderr
    assert validated.stdout.startswith(f"{deployment.policies}: {DEPLOYED_SUMMARY}")
    tested = run_cedarberg("policies", "test", "--config", str(deployment.config))
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "PASS ALLOW tests/ALLOW/auditors-read-metrics.json" in tested.stdout
    assert tested.stdout.splitlines()[-1] == "1 passed, 0 failed"
    # Without settings: the bundled policies, as before.
    bundled = run_cedarberg("policies", "validate", cwd=deployment.home)
    assert bundled.returncode == 0, bundled.stderr
    assert f"{REPO_ROOT / 'policies'}: {BUNDLED_SUMMARY}" in bundled.stdout


def test_the_environment_names_the_policy_directory_as_for_serve(
    deployment: Deployment, tmp_path: Path
) -> None:
    env = clean_environ(CEDARBERG_AUTHZ__POLICY_DIR=str(deployment.policies))
    validated = run_cedarberg("policies", "validate", cwd=tmp_path, env=env)
    assert validated.returncode == 0, validated.stderr
    assert validated.stdout.startswith(f"{deployment.policies}: {DEPLOYED_SUMMARY}")
    tested = run_cedarberg("policies", "test", cwd=tmp_path, env=env)
    assert tested.returncode == 0, tested.stdout + tested.stderr
    assert "auditors-read-metrics.json" in tested.stdout
    # Variables and flags combine as for serve: the policies of the variable, the registry of the flag.
    decided = explain(
        *reader("auditors"),
        "--data-dir",
        str(deployment.gateway.data_dir),
        *deployment.store(),
        cwd=tmp_path,
        env=env,
    )
    assert decided.returncode == 0, decided.stdout + decided.stderr
    assert "auditors-read  (auditors.cedar:2)" in decided.stdout
    assert f"policies:  {deployment.policies}" in decided.stdout
    # The variable overrides the file, as for serve.
    elsewhere = bundled_policies(tmp_path / "other")
    both = run_cedarberg(
        "policies", "validate", "--config", str(deployment.config),
        env=clean_environ(CEDARBERG_AUTHZ__POLICY_DIR=str(elsewhere)),
    )  # fmt: skip
    assert both.returncode == 0, both.stderr
    assert both.stdout.startswith(f"{elsewhere}: {BUNDLED_SUMMARY}")


def test_a_directory_given_on_the_command_line_overrides_the_settings(deployment: Deployment) -> None:
    bundled = REPO_ROOT / "policies"
    validated = run_cedarberg("policies", "validate", str(bundled), "--config", str(deployment.config))
    assert validated.returncode == 0, validated.stderr
    assert validated.stdout.startswith(f"{bundled}: {BUNDLED_SUMMARY}")
    decided = explain(*reader("auditors"), "--dir", str(bundled), *deployment.settings())
    assert decided.returncode == 1, decided.stdout + decided.stderr
    assert "no policy permits this request (default deny)" in decided.stdout


def test_the_offline_review_reads_the_configured_policies(deployment: Deployment) -> None:
    reviewed = run_cedarberg(
        "policies", "review", "--offline", "--config", str(deployment.config), "--resource", TABLE,
        "--action", "loadTable", "--subject", "key:audrey=auditors", "--json",
    )  # fmt: skip
    assert reviewed.returncode == 0, reviewed.stderr
    (action,) = json.loads(reviewed.stdout)["actions"]
    assert [(p["id"], p["policy_ids"]) for p in action["principals"]] == [("key:audrey", ["auditors-read"])]


# -- explain decides on the live grants, as the gateway ---------------------------------------------


def test_explain_allows_what_a_live_grant_allows_as_the_gateway_does(deployment: Deployment) -> None:
    # The gateway lets bea (group bi) read: the namespace property cedarberg.readers=bi grants it.
    assert deployment.load_table(deployment.keys["bea"]) == 200
    live = explain(*reader("bi", "key:bea"), *deployment.settings())
    assert live.returncode == 0, live.stdout + live.stderr
    assert "decision:  ALLOW" in live.stdout
    assert "readers-read-granted" in live.stdout
    assert f"grants:    live, from the registry at {deployment.store_description()}" in live.stdout
    assert f"policies:  {deployment.policies}" in live.stdout
    # From the gateway's directory with no flag: the default ./.cedarberg registry is found (on
    # PostgreSQL the operator's CEDARBERG_STORE_URL names the store, as for serve).
    store = {"CEDARBERG_STORE_URL": deployment.gateway.store_url} if deployment.gateway.store_url else {}
    found = explain(*reader("bi", "key:bea"), cwd=deployment.home, env=clean_environ(**store))
    assert found.returncode == 0, found.stdout + found.stderr
    assert "grants:    live, from the registry" in found.stdout


def test_explain_denies_what_the_gateway_denies(deployment: Deployment) -> None:
    # zed (group finance) has no grant on the namespace: the gateway refuses (a 404: a table the
    # caller may not see is not said to exist), explain agrees.
    assert deployment.load_table(deployment.keys["zed"]) == 404
    denied = explain(*reader("finance", "key:zed"), *deployment.settings())
    assert denied.returncode == 1, denied.stdout + denied.stderr
    assert "decision:  DENY" in denied.stdout
    # A stated --property replaces the registry's value of that key: a "what if" on the grants.
    what_if = explain(
        *reader("finance", "key:zed"), "--property", f"{NS}:cedarberg.readers=finance", *deployment.settings()
    )
    assert what_if.returncode == 0, what_if.stdout + what_if.stderr
    assert deployment.load_table(deployment.keys["zed"]) == 404  # the registry is unchanged
    # A warehouse the deployment does not have is bad input, not a decision on nothing.
    unknown = explain(*reader("bi"), "--resource", "nowhere/sales/orders", *deployment.settings())
    assert unknown.returncode == 2
    assert "warehouse does not exist: nowhere (configured: default)" in unknown.stderr
    assert unknown.stdout == ""


def test_offline_explain_decides_on_the_policies_alone(deployment: Deployment) -> None:
    offline = explain(*reader("bi", "key:bea"), "--offline", "--config", str(deployment.config))
    assert offline.returncode == 1, offline.stdout + offline.stderr
    assert "no policy permits this request (default deny)" in offline.stdout
    assert "grants:    only those stated with --property (--offline)" in offline.stdout
    assert f"policies:  {deployment.policies}" in offline.stdout  # still the configured policies
    stated = explain(
        *reader("bi", "key:bea"), "--offline", "--property", f"{NS}:cedarberg.readers=bi", cwd=deployment.home
    )
    assert stated.returncode == 0, stated.stdout + stated.stderr
    # --offline reads no registry: naming one with it is a usage error.
    both = explain(*reader("bi"), "--offline", *deployment.settings())
    assert both.returncode == 2
    assert "--offline reads no registry" in both.stderr
    assert both.stdout == ""


def test_without_a_deployment_explain_says_no_live_grants_were_read(tmp_path: Path) -> None:
    nothing = explain(*reader("bi"), cwd=tmp_path)
    assert nothing.returncode == 1, nothing.stdout + nothing.stderr
    store = f"sqlite:///{tmp_path / '.cedarberg' / 'catalog.db'}"
    assert f"no deployment found: no settings named and no registry at {store}" in nothing.stdout
    assert list(tmp_path.iterdir()) == []  # nothing was created to look for grants


# -- what cannot be read is said, never decided -----------------------------------------------------


def test_a_registry_that_cannot_be_read_is_an_error_not_a_deny(tmp_path: Path) -> None:
    missing = tmp_path / "no-registry-here"
    absent = explain(*reader("bi"), "--data-dir", str(missing))
    assert absent.returncode == 3
    assert absent.stdout == ""  # no decision
    assert "cannot read the live grants from the registry at" in absent.stderr
    assert f"the registry file {missing / 'catalog.db'} does not exist" in absent.stderr
    assert not missing.exists()  # never created
    url = f"postgresql+asyncpg://cedarberg:hunter2-secret@127.0.0.1:{free_port()}/catalog"
    down = explain(*reader("bi"), "--store-url", url)
    assert down.returncode == 3
    assert down.stdout == ""
    assert (
        "cannot read the live grants from the registry at postgresql+asyncpg://cedarberg:***@127.0.0.1"
        in (down.stderr)
    )
    assert "hunter2" not in down.stderr
    assert "--offline" in down.stderr  # what to do instead


def test_a_settings_error_is_the_message_serve_prints(tmp_path: Path) -> None:
    broken = tmp_path / "broken.toml"
    broken.write_text("[authz\npolicy_dir = 'x'\n")
    served = run_cedarberg("serve", "--config", str(broken), cwd=tmp_path)
    assert served.returncode == 2
    assert "is not valid TOML" in served.stderr
    for command in (["validate"], ["test"], ["explain", *reader("bi")], ["review", "--resource", TABLE]):
        run = run_cedarberg("policies", *command, "--config", str(broken), cwd=tmp_path)
        assert (run.returncode, run.stderr, run.stdout) == (2, served.stderr, ""), command
    bad_env = clean_environ(CEDARBERG_AUTHZ__RELOAD_INTERVAL_SECONDS="often")
    served = run_cedarberg("serve", cwd=tmp_path, env=bad_env)
    assert served.returncode == 2
    assert "invalid setting 'authz.reload_interval_seconds'" in served.stderr
    run = run_cedarberg("policies", "validate", cwd=tmp_path, env=bad_env)
    assert (run.returncode, run.stderr) == (2, served.stderr)
    assert list(tmp_path.iterdir()) == [broken]  # serve refused before creating anything


def test_each_command_help_says_where_settings_come_from() -> None:
    for command in ("validate", "test", "explain", "review"):
        shown = run_cedarberg("policies", command, "--help")
        assert shown.returncode == 0, shown.stderr
        text = " ".join(shown.stdout.split())
        assert "--config" in text, command
        assert "CEDARBERG_AUTHZ__POLICY_DIR" in text, command
        assert "as `cedarberg serve` reads them" in text, command
    explained = " ".join(run_cedarberg("policies", "explain", "--help").stdout.split())
    assert "--offline" in explained
    assert "live ones, read from its registry" in explained
    assert "3 the registry cannot be read" in explained
