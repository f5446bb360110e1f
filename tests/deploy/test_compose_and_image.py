"""deploy/compose.yaml and deploy/Dockerfile, checked offline (no Docker engine runs here).

The compose file is resolved by Debian's `docker-compose` (which validates it against the Compose
specification and interpolates variables without contacting an engine); the Dockerfile is parsed
and its instructions checked against the repository; both gateway configurations load through the
gateway's own settings loader.
"""

from __future__ import annotations

import fnmatch
import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from cedarberg.gateway.config.settings import Settings, load_settings
from tests.support.gateway import REPO_ROOT

DEPLOY = REPO_ROOT / "deploy"
COMPOSE = DEPLOY / "compose.yaml"
ENV = {"CEDARBERG_DB_PASSWORD": "db-secret-placeholder", "OPENBAO_DEV_TOKEN": "bao-token-placeholder"}


def _compose(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("docker-compose")
    if binary is None:
        pytest.fail("docker-compose not found: make test installs it (scripts/install-test-deps.sh)")
    clean = {k: v for k, v in os.environ.items() if k not in ENV and not k.startswith("DOCKER_")}
    # An unreachable engine address proves the check never needs one.
    clean["DOCKER_HOST"] = "tcp://127.0.0.1:9"
    return subprocess.run(
        [binary, "-f", str(COMPOSE), "config"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**clean, **env},
    )


@pytest.fixture(scope="module")
def resolved() -> dict[str, Any]:
    done = _compose(ENV)
    assert done.returncode == 0, done.stderr
    document: dict[str, Any] = yaml.safe_load(done.stdout)
    return document


def test_compose_runs_two_gateways_on_shared_services(resolved: dict[str, Any]) -> None:
    services = resolved["services"]
    assert set(services) == {"gateway-1", "gateway-2", "postgres", "redis", "openbao", "openbao-init"}
    first, second = services["gateway-1"], services["gateway-2"]
    for gateway in (first, second):
        depends = gateway["depends_on"]
        assert depends["postgres"]["condition"] == "service_healthy"
        assert depends["redis"]["condition"] == "service_healthy"
        assert depends["openbao-init"]["condition"] == "service_completed_successfully"
        assert "/ready" in " ".join(gateway["healthcheck"]["test"])
    same = ("image", "command", "environment", "volumes", "secrets")
    assert {key: first[key] for key in same} == {key: second[key] for key in same}
    assert first["ports"] != second["ports"]
    for service in ("postgres", "redis", "openbao"):
        assert services[service]["healthcheck"]["test"], service
    # Long enough for the gateway's own drain (shutdown_timeout_seconds = 30 in its config).
    assert first["stop_grace_period"] in ("40s", "40000000000")


def test_compose_holds_no_secret_and_refuses_to_start_without_them(resolved: dict[str, Any]) -> None:
    raw = COMPOSE.read_text()
    assert ENV["CEDARBERG_DB_PASSWORD"] not in raw
    for name in ENV:
        assert f"${{{name}:?" in raw  # required from the environment, no default
    missing = _compose({})
    assert missing.returncode != 0
    assert "set CEDARBERG_DB_PASSWORD" in missing.stderr or "set OPENBAO_DEV_TOKEN" in missing.stderr
    assert (DEPLOY / "compose" / "make-dev-secrets.sh").is_file()
    ignored = (REPO_ROOT / ".gitignore").read_text()
    assert "deploy/compose/tls/" in ignored
    assert "deploy/compose/token-signing-key.pem" in ignored


def _container_path(volume: Any) -> tuple[str, str]:
    if isinstance(volume, dict):
        return str(volume.get("source", "")), str(volume["target"])
    source, target = str(volume).split(":")[:2]
    return source, target


def test_the_compose_gateways_configuration_loads(resolved: dict[str, Any], tmp_path: Path) -> None:
    gateway = resolved["services"]["gateway-1"]
    mounts = dict(_container_path(v)[::-1] for v in gateway["volumes"])
    config_source = Path(mounts["/etc/cedarberg/cedarberg.toml"])
    assert config_source.resolve() == (DEPLOY / "compose" / "cedarberg.toml").resolve()
    assert Path(mounts["/etc/cedarberg/policies"]).resolve() == (REPO_ROOT / "policies").resolve()
    settings = load_settings(config_source, dict(gateway["environment"]), {})
    assert settings.host == "0.0.0.0"
    assert settings.tls.enabled
    assert settings.rate_limits.storage_uri == "redis://redis:6379/0"
    assert settings.effective_store_url().startswith(
        "postgresql+asyncpg://cedarberg:db-secret-placeholder@postgres"
    )
    assert settings.kms.kek.startswith("vault-transit://openbao:8200/")
    assert settings.kms.vault.token is not None
    assert settings.tokens.key_file == Path("/run/secrets/token-signing-key.pem")
    secret_targets = {s["target"] for s in gateway["secrets"]}
    assert "token-signing-key.pem" in secret_targets
    assert settings.warehouses["main"].location.startswith("file:///var/lib/cedarberg-warehouse")
    assert "/var/lib/cedarberg-warehouse" in mounts  # shared by both gateways


# -- the image ---------------------------------------------------------------------------------


def _instructions(dockerfile: Path) -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) with line continuations joined and comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for line in dockerfile.read_text().splitlines():
        stripped = line.strip()
        if not pending and (not stripped or stripped.startswith("#")):
            continue
        if stripped.endswith("\\"):
            pending += stripped[:-1] + " "
            continue
        whole = pending + stripped
        pending = ""
        keyword, _, arguments = whole.partition(" ")
        out.append((keyword.upper(), arguments.strip()))
    return out


def _ignored(path: str, patterns: list[str]) -> bool:
    parts = Path(path).parts
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    return any(fnmatch.fnmatch(prefix, pattern) for pattern in patterns for prefix in prefixes)


def test_the_dockerfile_builds_a_pinned_non_root_image() -> None:
    instructions = _instructions(DEPLOY / "Dockerfile")
    args = dict(re.match(r"(\w+)=(\S+)", a).groups() for k, a in instructions if k == "ARG" and "=" in a)  # type: ignore[union-attr]
    bases = [a.split()[0] for k, a in instructions if k == "FROM"]
    assert len(bases) == 2  # build and runtime stages
    for base in bases:
        image = args.get(base.strip("${}"), base)
        assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm", image), image  # a pinned patch release
    user = [a for k, a in instructions if k == "USER"]
    assert user
    assert user[-1].split(":")[0] not in ("0", "root")
    assert ("EXPOSE", "8181") in instructions
    assert Settings().port == 8181
    healthcheck = next(a for k, a in instructions if k == "HEALTHCHECK")
    assert "/health" in healthcheck
    assert "curl" not in healthcheck
    assert ("ENTRYPOINT", '["cedarberg"]') in instructions
    cmd = next(a for k, a in instructions if k == "CMD")
    assert "/etc/cedarberg/cedarberg.toml" in cmd

    ignore = [
        line.strip().rstrip("/")
        for line in (REPO_ROOT / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    ignore = [p.removeprefix("**/") for p in ignore]
    copied = 0
    for keyword, arguments in instructions:
        if keyword != "COPY" or arguments.startswith("--from"):
            continue
        *sources, _target = arguments.split()
        for source in sources:
            assert (REPO_ROOT / source).exists(), f"COPY {source}: not in the repository"
            assert not _ignored(source, ignore), f"COPY {source}: excluded by .dockerignore"
            copied += 1
    assert copied >= 6
    assert _ignored(".venv", ignore)
    assert _ignored("tests/e2e/test_scaleout.py", ignore)


def test_the_image_default_configuration_loads() -> None:
    settings = load_settings(DEPLOY / "container" / "cedarberg.toml", {}, {})
    assert settings.host == "0.0.0.0"
    assert settings.tls.enabled  # a pod address is never served in plain HTTP by default
    assert settings.authz.policy_dir == Path("/etc/cedarberg/policies")
    assert settings.data_dir == Path("/var/lib/cedarberg")
