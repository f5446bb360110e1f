"""A refused policy set says why, wherever an operator looks (issue 29 §3).

A real gateway watches a copy of the default policies. A broken `.cedar` file is written into the
directory: the watcher refuses the set and the last good set keeps deciding. Then
- the log line of the refusal names the directory, the version that stays active and every
  problem as `FILE:LINE: message`, in the JSON format and in the text format;
- `/ready` stays 200 and its `detail.policies` says where, when, and at which lines;
- `/metrics` counts the refused reload, shows the refused gauge at 1 and the active version.
Fixing the file clears every signal (the control), and the fixed set's version is logged and shown.

The JSON gateway runs two workers, so the metrics are those of the multiprocess mode (each worker
reloads on its own: two refused reloads, one version at 1 per worker); the text gateway runs one.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families

from tests.support.gateway import REPO_ROOT, GatewayProcess
from tests.support.ports import free_port

POLICIES = REPO_ROOT / "policies"
DEADLINE_SECONDS = 20.0
BROKEN_FILE = "finance-grants.cedar"
# The grammar error is on line 3 of the file: that is the location every signal must name.
BROKEN_TEXT = "// grants for the finance team\n\npermit (principal, action, resource) when { principal. };\n"
BROKEN_AT = f"{BROKEN_FILE}:3"
FIXED_TEXT = (
    "// grants for the finance team\n\n"
    '@id("finance-nothing")\nforbid (principal, action, resource) when { false };\n'
)


def _wait_for(condition: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + DEADLINE_SECONDS
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


def _metrics(gw: GatewayProcess) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    answer = requests.get(f"{gw.url}/metrics", timeout=30)
    assert answer.status_code == 200, answer.text
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(answer.text)
        for sample in family.samples
    }


def _ready(gw: GatewayProcess) -> requests.Response:
    return requests.get(f"{gw.url}/ready", timeout=30)


def _active_version(gw: GatewayProcess) -> str:
    version: str = requests.get(f"{gw.url}/admin/v1/policies", timeout=30).json()["version"]
    return version


def _refusal_lines_json(gw: GatewayProcess) -> list[dict[str, Any]]:
    records = [json.loads(line) for line in gw.log_text().splitlines() if line.startswith("{")]
    return [r for r in records if "level" in r and r["message"].startswith("policy set refused")]


def _refusal_lines_text(gw: GatewayProcess) -> list[str]:
    return [line for line in gw.log_text().splitlines() if " policy set refused in " in line]


@pytest.fixture
def policy_dir(tmp_path: Path) -> Path:
    copy = tmp_path / "policies"
    shutil.copytree(POLICIES, copy, ignore=shutil.ignore_patterns("tests"))
    return copy


def _gateway(
    tmp_path: Path, store_url: str | None, policy_dir: Path, fmt: Literal["json", "text"], workers: int
) -> GatewayProcess:
    config = {"log_format": fmt, "authz": {"policy_dir": str(policy_dir), "reload_interval_seconds": 0.3}}
    workers_args = ["--workers", str(workers)]
    return GatewayProcess(tmp_path / "gw", store_url=store_url, config=config, extra_args=workers_args)


def _check_ready_reports_the_refusal(gw: GatewayProcess, policy_dir: Path, active: str) -> None:
    answer = _ready(gw)
    assert answer.status_code == 200, answer.text  # the last good set serves: still ready
    body = answer.json()
    assert body["status"] == "ready"
    assert body["checks"]["policies"] == "ok"
    detail = body["detail"]["policies"]
    assert detail["state"] == "refused"
    assert detail["directory"] == str(policy_dir)
    assert detail["active_version"] == active
    assert detail["refused_version"] not in ("", active)
    assert detail["problems"] == [BROKEN_AT]
    assert detail["problem_count"] == 1
    refused_at = dt.datetime.fromisoformat(detail["refused_at"])
    assert abs((dt.datetime.now(dt.UTC) - refused_at).total_seconds()) < 120
    assert "unexpected token" not in answer.text  # the messages are for the log and the admin API


def _check_cleared(gw: GatewayProcess, old: str, workers: int) -> str:
    """After the fix: the refused gauge 0 and the fixed version at 1 in every worker, the replaced
    version no longer shown as active (gone in one process, 0 in each worker), /ready without
    detail whichever worker answers."""
    _wait_for(lambda: _active_version(gw) != old, "the fixed set to load")
    new = _active_version(gw)

    def cleared() -> bool:
        samples = _metrics(gw)
        return (
            samples.get(("cedarberg_policy_set_refused", ())) == 0.0
            and samples.get(("cedarberg_policy_set_info", (("version", new),))) == 1.0
            and samples.get(("cedarberg_policy_set_info", (("version", old),)), 0.0) == 0.0
        )

    _wait_for(cleared, "every worker to load the fixed set")
    assert _metrics(gw)[("cedarberg_policy_reload_failures_total", ())] == workers  # counted, not reset
    for _ in range(6):  # a new connection each time: any worker may answer
        answer = _ready(gw)
        assert answer.status_code == 200
        assert "detail" not in answer.json()
    return new


def test_a_refused_set_is_explained_in_json_logs_ready_and_metrics(
    tmp_path: Path, fresh_store_url: str | None, policy_dir: Path
) -> None:
    workers = 2
    with _gateway(tmp_path, fresh_store_url, policy_dir, "json", workers) as gw:
        active = _active_version(gw)
        samples = _metrics(gw)
        assert samples[("cedarberg_policy_set_info", (("version", active),))] == 1.0
        assert samples[("cedarberg_policy_set_refused", ())] == 0.0
        assert samples[("cedarberg_policy_reload_failures_total", ())] == 0.0
        assert "detail" not in _ready(gw).json()

        (policy_dir / BROKEN_FILE).write_text(BROKEN_TEXT)
        _wait_for(
            lambda: _metrics(gw)[("cedarberg_policy_reload_failures_total", ())] == workers,
            "every worker to refuse the set",
        )
        samples = _metrics(gw)
        assert samples[("cedarberg_policy_set_refused", ())] == 1.0
        assert samples[("cedarberg_policy_set_info", (("version", active),))] == 1.0
        _check_ready_reports_the_refusal(gw, policy_dir, active)
        assert _active_version(gw) == active

        refusals = _refusal_lines_json(gw)
        assert len(refusals) == workers  # once per worker, not once per poll
        for line in refusals:
            assert line["level"] == "ERROR"
            assert line["policy_dir"] == str(policy_dir)
            assert line["policy_version"] == active
            assert line["refused_version"] not in ("", active)
            [problem] = line["problems"]
            assert problem.startswith(f"{BROKEN_AT}: unexpected token")
            assert f"version {active[:12]} stays active" in line["message"]

        (policy_dir / BROKEN_FILE).write_text(FIXED_TEXT)
        new = _check_cleared(gw, active, workers)
        loaded = [
            json.loads(line)
            for line in gw.log_text().splitlines()
            if line.startswith("{") and f"policy set {new[:12]} loaded" in line
        ]
        assert len(loaded) == workers
        assert all(r["policy_version"] == new and r["policy_dir"] == str(policy_dir) for r in loaded)
        assert BROKEN_FILE in loaded[0]["policy_files"]


def test_a_refused_set_is_explained_in_text_logs_ready_and_metrics(
    tmp_path: Path, fresh_store_url: str | None, policy_dir: Path
) -> None:
    with _gateway(tmp_path, fresh_store_url, policy_dir, "text", 1) as gw:
        active = _active_version(gw)
        startup = [line for line in gw.log_text().splitlines() if f"policy set {active[:12]} loaded" in line]
        assert startup
        assert f" policy_version={active} policy_dir={policy_dir} " in startup[0]

        (policy_dir / BROKEN_FILE).write_text(BROKEN_TEXT)
        _wait_for(lambda: "detail" in _ready(gw).json(), "/ready to report the refusal")
        _check_ready_reports_the_refusal(gw, policy_dir, active)
        samples = _metrics(gw)
        assert samples[("cedarberg_policy_reload_failures_total", ())] == 1.0
        assert samples[("cedarberg_policy_set_refused", ())] == 1.0

        [line] = _refusal_lines_text(gw)
        assert " ERROR cedarberg.gateway.authz " in line
        assert f' problems=["{BROKEN_AT}: unexpected token' in line
        assert f" policy_dir={policy_dir} " in line
        assert f" policy_version={active} " in line

        (policy_dir / BROKEN_FILE).write_text(FIXED_TEXT)
        _check_cleared(gw, active, 1)


def test_a_set_refused_at_start_names_every_problem_before_serve_exits(tmp_path: Path) -> None:
    # At start there is no last good set: serve exits, and its error names each problem's
    # FILE:LINE, not only the first.
    policy_dir = tmp_path / "policies"
    shutil.copytree(POLICIES, policy_dir, ignore=shutil.ignore_patterns("tests"))
    (policy_dir / BROKEN_FILE).write_text(BROKEN_TEXT, encoding="utf-8")
    second = "\n\nforbid (principal, action, resource) when {"
    (policy_dir / "second-broken.cedar").write_text(second, encoding="utf-8")
    environ = {k: v for k, v in os.environ.items() if not k.startswith("CEDARBERG_")}
    started = subprocess.run(
        [sys.executable, "-m", "cedarberg.gateway.cli", "serve", "--port", str(free_port()),
         "--data-dir", str(tmp_path / "data")],
        capture_output=True, text=True, timeout=120, check=False, cwd=tmp_path,
        env={**environ, "CEDARBERG_AUTHZ__POLICY_DIR": str(policy_dir)},
    )  # fmt: skip
    assert started.returncode == 1, started.stderr
    lines = started.stderr.splitlines()
    (at,) = [i for i, line in enumerate(lines) if line.startswith("cedarberg: policy set refused: ")]
    first, problems = lines[at], lines[at + 1 :]
    assert "(and 1 more)" in first
    assert any(line.strip().startswith(BROKEN_AT) for line in problems), started.stderr
    assert any("second-broken.cedar:3" in line for line in problems), started.stderr
    assert "Traceback" not in started.stderr
