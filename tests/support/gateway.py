"""Run the real gateway (``python -m cedarberg.gateway.cli serve``) as a child process.

The process listens on a free loopback port; its stdout and stderr go to a log file beside the
data directory, so a failing test can show what the server said (``log_text()``).
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import re
import shutil
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from tests.support.forkserver import ForkedProcess, fork_server
from tests.support.ports import free_port

_WRITER_STARTED = re.compile(r"registry writer started \(pid (\d+)\)")

REPO_ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT = 30.0
STOP_TIMEOUT = 10.0
# `cedarberg serve` says "port N on HOST is in use: ..." (gateway.serve.listen).
_ADDRESS_IN_USE = re.compile(
    r"address already in use|errno 98|is in use: stop the other process", re.IGNORECASE
)


# What a catalog-behaviour test gateway adds to its configuration: requests without credentials
# act as an admin, and limits are far above what the suites send from one loopback address.
TEST_DEFAULTS: dict[str, Any] = {
    "anonymous": {"principal": "test-admin", "groups": ["admins"]},
    "purge_interval_seconds": 0.2,
    "rate_limits": {
        "per_address": "1000000/minute",
        "read": "1000000/minute",
        "write": "1000000/minute",
        "admin": "1000000/minute",
        "token": "1000000/minute",
    },
}


class GatewayError(RuntimeError):
    """The gateway process could not be started or did not become ready."""


class GatewayProcess:
    """One gateway server process.

    ``config`` is a TOML-able dict written to a file and passed with ``--config``;
    ``store_url`` is passed with ``--store-url``; ``extra_args`` are appended to the command
    line; ``env`` adds to (or, with ``None`` values, removes from) the inherited environment,
    from which ``CEDARBERG_*`` variables are always removed.
    Restarting after ``stop()`` reuses the same port, data directory and log file.

    For a gateway serving TLS (configured through ``config``/``extra_args``), pass ``ca_cert``:
    ``url`` becomes ``https://...`` and the readiness probe trusts that CA. ``probe_headers``
    (e.g. an ``Authorization`` header) are sent with the readiness probe, for a gateway that
    refuses unauthenticated requests.
    """

    def __init__(
        self,
        data_dir: Path | str,
        store_url: str | None = None,
        config: Mapping[str, Any] | None = None,
        extra_args: Sequence[str] = (),
        *,
        port: int | None = None,
        env: Mapping[str, str | None] | None = None,
        log_path: Path | str | None = None,
        ready_timeout: float = READY_TIMEOUT,
        anonymous: bool = True,
        ca_cert: Path | str | None = None,
        probe_headers: Mapping[str, str] | None = None,
    ) -> None:
        self.data_dir = Path(data_dir).resolve()
        self.store_url = store_url
        # Catalog-behaviour suites run as an explicit anonymous admin (authentication and Cedar
        # still run on every request); security suites pass `anonymous=False`.
        merged = {**(TEST_DEFAULTS if anonymous else {}), **(config or {})}
        if anonymous and "warehouses" not in merged:
            # The embedded default warehouse, sealed, with no undrop retention: a dropped table is
            # purged by the gateway within `purge_interval_seconds`. And warehouse "plain", whose
            # metadata files are plain Iceberg, owned by the engines as in any REST catalog.
            merged["warehouses"] = {
                "default": {"location": (self.data_dir / "warehouse").as_uri(), "drop_retention_seconds": 0},
                "plain": {"location": (self.data_dir / "plain").as_uri(), "seal_metadata_files": False},
            }
        self.config: dict[str, Any] | None = merged or None
        self.extra_args = tuple(extra_args)
        self._fixed_port = port is not None
        self.port = port if port is not None else free_port()
        self.env = dict(env or {})
        self.log_path = Path(log_path) if log_path else self.data_dir.parent / f"{self.data_dir.name}.log"
        self.config_path = self.data_dir.parent / f"{self.data_dir.name}.toml"
        self.ready_timeout = ready_timeout
        self.ca_cert = Path(ca_cert) if ca_cert is not None else None
        self.probe_headers = dict(probe_headers or {})
        self.process: subprocess.Popen[bytes] | ForkedProcess | None = None
        self._log_file: IO[bytes] | None = None
        self.anonymous = anonymous
        self._admin_key: str | None = None

    # -- credentials -------------------------------------------------------------------------

    @property
    def admin_key(self) -> str:
        """An API key of group ``admins``, issued once through the admin API by the anonymous
        test admin (clients that always send a bearer header, like pyiceberg, need a real one)."""
        if self._admin_key is None:
            if not self.anonymous:
                raise GatewayError("admin_key needs a gateway with the anonymous test admin")
            body = json.dumps({"principal": "test-admin-key", "kind": "service", "groups": ["admins"]})
            request = urllib.request.Request(
                f"{self.url}/admin/v1/api-keys",
                data=body.encode(),
                headers={"Content-Type": "application/json"},
                method="POST",
            )
            with urllib.request.urlopen(request, timeout=30) as answer:
                self._admin_key = str(json.loads(answer.read())["key"])
        return self._admin_key

    def forget_admin_key(self) -> None:
        """Issue a new admin key on next use (after the registry holding the old one was lost)."""
        self._admin_key = None

    # -- addresses ---------------------------------------------------------------------------

    @property
    def host(self) -> str:
        return "127.0.0.1"

    @property
    def scheme(self) -> str:
        """``https`` when a ``ca_cert`` was given (the gateway serves TLS), else ``http``."""
        return "https" if self.ca_cert is not None else "http"

    @property
    def url(self) -> str:
        """Base URL, e.g. ``http://127.0.0.1:PORT`` (no trailing slash)."""
        return f"{self.scheme}://{self.host}:{self.port}"

    @property
    def warehouse_dir(self) -> Path:
        """Directory of the ``default`` warehouse."""
        warehouses = (self.config or {}).get("warehouses", {})
        location = warehouses.get("default", {}).get("location") if isinstance(warehouses, dict) else None
        if location:
            return _path_from_location(str(location))
        return self.data_dir / "warehouse"

    @property
    def store_kind(self) -> str:
        """``"postgres"`` or ``"sqlite"``."""
        return "postgres" if (self.store_url or "").startswith("postgresql") else "sqlite"

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process else None

    def is_running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def registry_writer_pid(self) -> int | None:
        """The SQLite registry's writer process of the current run (a supervisor with several
        workers on SQLite forks one: `gateway.serve.registry_writer`), as the supervisor logged
        its latest start; None if this run has none."""
        started = _WRITER_STARTED.findall(self._log_since_start())
        return int(started[-1]) if started else None

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Run ``cedarberg ARGS --config .. --data-dir ..`` against this gateway's store, offline."""
        argv = [sys.executable, "-m", "cedarberg.gateway.cli", *args, "--data-dir", str(self.data_dir)]
        if self.config is not None:
            argv += ["--config", str(self.config_path)]
        env = None
        if self.store_url:
            # Not every command takes `--store-url`; every one reads the setting's variable.
            env = {**os.environ, "CEDARBERG_STORE_URL": self.store_url}
        return subprocess.run(
            argv, capture_output=True, text=True, timeout=120, check=False, cwd=REPO_ROOT, env=env
        )

    # -- life cycle --------------------------------------------------------------------------

    def command(self) -> list[str]:
        argv = [
            sys.executable, "-m", "cedarberg.gateway.cli", "serve",
            "--host", self.host, "--port", str(self.port), "--data-dir", str(self.data_dir),
        ]  # fmt: skip
        if self.store_url:
            argv += ["--store-url", self.store_url]
        if self.config is not None:
            argv += ["--config", str(self.config_path)]
        argv += list(self.extra_args)
        return argv

    def start(self) -> GatewayProcess:
        """Start the process and wait until ``GET /v1/config`` answers 200.

        Raises ``GatewayError`` (with the end of the log) if it exits or is not ready in time.
        """
        if self.is_running():
            return self
        self.data_dir.mkdir(parents=True, exist_ok=True)
        if self.config is not None:
            self.config_path.write_text(to_toml(self.config))
        for attempt in range(3):
            self._spawn()
            try:
                self.wait_ready()
                return self
            except GatewayError as exc:
                self._kill()
                lost_port = _ADDRESS_IN_USE.search(self._log_since_start())
                if not lost_port or self._fixed_port or attempt == 2:
                    raise GatewayError(str(exc)) from None
                self.port = free_port()  # someone took our port between probing and binding
        raise AssertionError("unreachable")

    def wait_ready(self, timeout: float | None = None) -> None:
        deadline = time.monotonic() + (timeout if timeout is not None else self.ready_timeout)
        probe = f"{self.url}/v1/config"
        request = urllib.request.Request(probe, headers=self.probe_headers)
        context = ssl.create_default_context(cafile=str(self.ca_cert)) if self.ca_cert is not None else None
        while True:
            if not self.is_running():
                code = self.process.returncode if self.process else None
                raise GatewayError(f"gateway exited with {code} before it was ready\n{self._tail()}")
            try:
                with urllib.request.urlopen(request, timeout=2, context=context) as response:
                    if response.status == 200:
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            if time.monotonic() > deadline:
                raise GatewayError(f"gateway not ready at {probe} after the timeout\n{self._tail()}")
            time.sleep(0.1)

    def stop(self, timeout: float = STOP_TIMEOUT) -> int | None:
        """SIGTERM, then SIGKILL after ``timeout`` seconds. Returns the exit code."""
        code = None
        if self.process is not None:
            if self.process.poll() is None:
                self.process.send_signal(signal.SIGTERM)
                try:
                    self.process.wait(timeout=timeout)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait(timeout=timeout)
            code = self.process.returncode
        self._close_log()
        return code

    def kill(self) -> None:
        """SIGKILL, no graceful shutdown (for crash tests)."""
        self._kill()

    def restart(self) -> GatewayProcess:
        self.stop()
        return self.start()

    def __enter__(self) -> GatewayProcess:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- logs ----------------------------------------------------------------------------------

    def log_text(self) -> str:
        """Everything the process (and earlier runs with the same log file) wrote."""
        if self._log_file is not None:
            self._log_file.flush()
        try:
            return self.log_path.read_text(errors="replace")
        except FileNotFoundError:
            return ""

    def _tail(self, chars: int = 6000) -> str:
        text = self._log_since_start()
        return f"--- {self.log_path} (tail) ---\n{text[-chars:]}"

    def _log_since_start(self) -> str:
        return self.log_text()[self._log_offset :]

    # -- internals -----------------------------------------------------------------------------

    def _spawn(self) -> None:
        self._close_log()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._log_file = self.log_path.open("ab")
        self._log_offset = len(self.log_text())
        self._log_file.write(f"\n=== {_now()} starting: {' '.join(self.command())}\n".encode())
        self._log_file.flush()
        # Settings come only from what the test passes: drop CEDARBERG_* from the caller's shell.
        env = {k: v for k, v in os.environ.items() if not k.startswith("CEDARBERG_")}
        env["PYTHONUNBUFFERED"] = "1"
        for key, value in self.env.items():
            if value is None:
                env.pop(key, None)
            else:
                env[key] = value
        server = fork_server()
        if server is not None:
            self._log_file.flush()
            self.process = server.spawn(self.command()[3:], env, REPO_ROOT, self.log_path)
            return
        self.process = subprocess.Popen(
            self.command(),
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
            cwd=REPO_ROOT,
            env=env,
        )

    def _kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=STOP_TIMEOUT)
        self._close_log()

    def _close_log(self) -> None:
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def __repr__(self) -> str:
        state = "running" if self.is_running() else "stopped"
        return f"<GatewayProcess {self.url} {state} data_dir={self.data_dir}>"

    _log_offset = 0


def _now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="milliseconds")


def _path_from_location(location: str) -> Path:
    parsed = urllib.parse.urlparse(location)
    if parsed.scheme in ("", "file"):
        return Path(urllib.parse.unquote(parsed.path))
    raise ValueError(f"not a local warehouse location: {location}")


# -- TOML ------------------------------------------------------------------------------------


def to_toml(document: Mapping[str, Any]) -> str:
    """Serialise a dict of scalars, lists of scalars and nested dicts (tables) to TOML."""
    lines: list[str] = []
    _write_table(document, [], lines)
    return "\n".join(lines).strip() + "\n"


def _write_table(table: Mapping[str, Any], path: list[str], lines: list[str]) -> None:
    scalars = {k: v for k, v in table.items() if not isinstance(v, Mapping)}
    tables = {k: v for k, v in table.items() if isinstance(v, Mapping)}
    if path and (scalars or not tables):
        lines.append("")
        lines.append("[" + ".".join(_key(p) for p in path) + "]")
    for key, value in scalars.items():
        if value is None:
            continue  # TOML has no null: leave the key out
        lines.append(f"{_key(key)} = {_value(value)}")
    for key, value in tables.items():
        _write_table(value, [*path, key], lines)


def _key(key: str) -> str:
    return key if re.fullmatch(r"[A-Za-z0-9_-]+", key) else _string(key)


def _string(text: str) -> str:
    # A JSON string literal is a valid TOML basic string, but for a raw DEL.
    return json.dumps(text, ensure_ascii=False).replace("\x7f", "\\u007F")


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            raise ValueError("NaN and infinities are not written")
        return repr(value)
    if isinstance(value, str):
        return _string(value)
    if isinstance(value, Path):
        return _string(str(value))
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    if isinstance(value, (list, tuple)):
        if any(isinstance(item, Mapping) for item in value):
            return "[" + ", ".join(_inline_table(item) for item in value) + "]"
        return "[" + ", ".join(_value(item) for item in value) + "]"
    raise TypeError(f"cannot write {type(value).__name__} to TOML")


def _inline_table(item: Mapping[str, Any]) -> str:
    parts = []
    for key, value in item.items():
        if value is None:
            continue
        rendered = _inline_table(value) if isinstance(value, Mapping) else _value(value)
        parts.append(f"{_key(key)} = {rendered}")
    return "{" + ", ".join(parts) + "}"


def bundled_policies(directory: Path, extra: Mapping[str, str] | None = None) -> Path:
    """`directory`: a copy of the bundled policies (without their tests), plus `extra` policy
    files (file name -> Cedar text)."""
    shutil.copytree(REPO_ROOT / "policies", directory, ignore=shutil.ignore_patterns("tests"))
    for name, text in (extra or {}).items():
        (directory / name).write_text(text)
    return directory
