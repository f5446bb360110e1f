"""`cedarberg serve` on a port that is taken: one clear line, a non-zero exit, and nothing created.

The real command runs in a subprocess on a fresh data directory while this test holds the port;
with one worker and with several (the supervisor's shared socket), the data directory must not
exist afterwards (no registry, no KMS key, no signing key) and "serving on" must not be logged.
"""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest

from tests.support.cli import run_cedarberg
from tests.support.gateway import GatewayProcess


def _serve(data_dir: Path, port: int, *extra: str) -> subprocess.CompletedProcess[str]:
    return run_cedarberg("serve", "--port", str(port), "--data-dir", str(data_dir), *extra)


@pytest.mark.parametrize("workers", ["1", "2"])
def test_a_port_in_use_is_said_before_anything_is_created(tmp_path: Path, workers: str) -> None:
    data_dir = tmp_path / "fresh"
    with socket.create_server(("127.0.0.1", 0)) as held:
        port = held.getsockname()[1]
        done = _serve(data_dir, port, "--workers", workers)
    assert done.returncode == 1, done.stderr
    expected = f"cedarberg: port {port} on 127.0.0.1 is in use: stop the other process or pass --port"
    assert expected in done.stderr.splitlines()
    assert "serving on" not in done.stdout + done.stderr
    assert "Traceback" not in done.stderr
    assert not data_dir.exists()  # no registry, no local KMS key, no token signing key


def test_the_freed_port_serves_and_says_so_once_listening(tmp_path: Path) -> None:
    """Control: the same command on the same port, once it is free, serves."""
    with socket.create_server(("127.0.0.1", 0)) as held:
        port = held.getsockname()[1]
        assert _serve(tmp_path / "first", port).returncode == 1
    with GatewayProcess(tmp_path / "fresh", port=port) as gateway:
        assert gateway.port == port
        assert "serving on http://127.0.0.1:" in gateway.log_text()
        assert (tmp_path / "fresh").is_dir()
