"""Keys come from the environment only, and never show up in a repr or an error."""

from __future__ import annotations

from pathlib import Path

import pytest

from cedarberg.pipelines.cli import main
from cedarberg.pipelines.config import ApiKey, ConfigError, PipelineConfig

KEY = "cbk_" + "a" * 16 + "_" + "S3cr3t" * 7 + "x"


def test_api_key_split_and_repr() -> None:
    key = ApiKey.parse(KEY, source="X")
    assert key.client_id == "a" * 16
    assert key.credential == f"{'a' * 16}:{'S3cr3t' * 7}x"
    assert key.secret not in repr(key)


@pytest.mark.parametrize("bad", ["", "cbk_short", KEY[:-1], "xbk" + KEY[3:]])
def test_malformed_keys_are_refused_without_echo(bad: str) -> None:
    with pytest.raises(ConfigError, match="PIPELINE_SERVICE_KEY") as excinfo:
        ApiKey.parse(bad, source="PIPELINE_SERVICE_KEY")
    assert not bad or bad not in str(excinfo.value)


def test_keys_from_environment() -> None:
    env = {"PIPELINE_SERVICE_KEY": KEY, "PIPELINE_ANALYST_KEY": KEY.replace("a", "b")}
    service, analyst = PipelineConfig.keys_from_environment(env)
    assert (service.client_id, analyst.client_id) == ("a" * 16, "b" * 16)
    with pytest.raises(ConfigError, match="PIPELINE_ANALYST_KEY"):
        PipelineConfig.keys_from_environment({"PIPELINE_SERVICE_KEY": KEY})


def test_config_repr_hides_secrets(tmp_path: Path) -> None:
    key = ApiKey.parse(KEY, source="X")
    config = PipelineConfig(
        uri="https://127.0.0.1:1", service_key=key, analyst_key=key, work_dir=tmp_path,
        truststore_password="hunter2",
    )  # fmt: skip
    assert key.secret not in repr(config)
    assert "hunter2" not in repr(config)
    assert config.token_uri == "https://127.0.0.1:1/v1/oauth/tokens"


def test_cli_without_keys_exits_2(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.delenv("PIPELINE_SERVICE_KEY", raising=False)
    monkeypatch.delenv("PIPELINE_ANALYST_KEY", raising=False)
    assert main(["run", "--uri", "https://127.0.0.1:1", "--work-dir", str(tmp_path)]) == 2
    assert "PIPELINE_SERVICE_KEY" in capsys.readouterr().err
