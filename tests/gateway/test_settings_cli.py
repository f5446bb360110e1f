"""Settings precedence and the CLI's one-line refusal of bad configuration."""

import subprocess
import sys
from pathlib import Path

import pytest

from cedarberg.gateway.config.settings import SettingsError, load_settings


def test_precedence_file_then_env_then_flags(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text('port = 9000\nlog_level = "DEBUG"\n[warehouses.sales]\nlocation = "/data/sales"\n')
    settings = load_settings(
        config,
        {"CEDARBERG_PORT": "9001", "CEDARBERG_DEFAULT_WAREHOUSE": "sales", "OTHER": "x"},
        {"port": 9002, "host": None},
    )
    assert settings.port == 9002
    assert settings.log_level == "DEBUG"
    assert settings.warehouses["sales"].location == "file:///data/sales"
    assert settings.default_warehouse == "sales"


def test_env_sets_nested_warehouse() -> None:
    settings = load_settings(
        None,
        {"CEDARBERG_WAREHOUSES__A__LOCATION": "file:/a", "CEDARBERG_DEFAULT_WAREHOUSE": "a"},
        {},
    )
    assert settings.effective_warehouses()["a"].location == "file:///a"


@pytest.mark.parametrize(
    ("environ", "named"),
    [
        ({"CEDARBERG_PORT": "70000"}, "port"),
        ({"CEDARBERG_STORE_URL": "mysql://x"}, "store_url"),
        ({"CEDARBERG_NO_SUCH": "1"}, "no_such"),
        ({"CEDARBERG_WAREHOUSES__CONFIG__LOCATION": "/x"}, "warehouses"),
        ({"CEDARBERG_DEFAULT_WAREHOUSE": "missing", "CEDARBERG_WAREHOUSES__A__LOCATION": "/a"}, "settings"),
    ],
)
def test_bad_settings_name_the_setting(environ: dict[str, str], named: str) -> None:
    with pytest.raises(SettingsError, match=named):
        load_settings(None, environ, {})


def test_store_url_secret_is_not_in_repr() -> None:
    settings = load_settings(None, {"CEDARBERG_STORE_URL": "postgresql+asyncpg://u:hunter2@h/db"}, {})
    assert "hunter2" not in repr(settings)


def test_cli_exits_nonzero_with_one_clear_line(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "cedarberg.gateway.cli", "serve", "--data-dir", str(tmp_path), "--port", "0"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1
    assert "port" in lines[0]


def test_cli_reports_unreadable_config(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("port = = 1")
    result = subprocess.run(
        [sys.executable, "-m", "cedarberg.gateway.cli", "serve", "--config", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert "not valid TOML" in result.stderr


def test_configuration_reference_is_current() -> None:
    from cedarberg.gateway.config.reference import render

    docs = Path(__file__).resolve().parents[2] / "docs" / "configuration.md"
    assert docs.read_text() == render(), "run: cedarberg config-reference > docs/configuration.md"


def test_example_deployment_config_is_valid() -> None:
    example = Path(__file__).resolve().parents[2] / "deploy" / "cedarberg.example.toml"
    settings = load_settings(example, {}, {})
    assert settings.default_warehouse == "main"
    assert settings.effective_store_url().startswith("postgresql+asyncpg://")


def test_serve_refuses_a_local_key_file_others_can_read(tmp_path: Path) -> None:
    key_dir = tmp_path / "kms"
    key_dir.mkdir(mode=0o700)
    key_file = key_dir / "default.key"
    key_file.write_text('{"format": 1, "current": "1", "versions": {"1": "' + "A" * 43 + '="}}')
    key_file.chmod(0o644)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "cedarberg.gateway.cli",
            "serve",
            "--data-dir",
            str(tmp_path),
            "--port",
            "18999",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 1, result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("cedarberg: ")
    assert "default.key" in last or "permission" in last.lower(), last
    assert "A" * 43 not in result.stderr  # key material never printed
