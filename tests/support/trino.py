"""A real single-node Trino coordinator (only the Iceberg connector) and a small client for it.

Trino 476 (the last release on Maven Central) is installed once, outside the clone, by
scripts/install-test-deps.sh: the server core and the Iceberg plugin, checked against pinned
SHA-256 digests, under ``~/.cache/cedarberg/trino-476``. It needs Java >= 24 (a JDK under
``/usr/lib/jvm``). Nothing here downloads anything.

    with TrinoServer(tmp / "trino", java_options=pki.java_options().split()) as trino:
        trino.create_catalog("lake", rest_catalog_properties(uri, credential=..., warehouse="lake"))
        trino.query("SELECT 1")                     # rows as Python values
        trino.query("SHOW SCHEMAS FROM lake", user="alice", extra_credentials={"token": "..."})

Catalogs are dynamic (``CREATE CATALOG``): one coordinator serves every module's gateways, and a
catalog with other properties (``iceberg.rest-catalog.session=USER`` ...) is one statement away.
The JVM's trust store (``java_options``) is fixed when it starts, so use the session's PKI.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

from tests.support.ports import free_port

# Keep in step with scripts/install-test-deps.sh, which writes this version into the marker.
TRINO_VERSION = "476"
TRINO_MIN_JAVA = 24
READY_TIMEOUT = 180.0
QUERY_TIMEOUT = 240.0
STOP_TIMEOUT = 20.0
JVM_JAVA_VERSION = re.compile(r'version "(\d+)')


class TrinoError(RuntimeError):
    """Trino could not be found, started, or reached."""


class TrinoQueryError(Exception):
    """A statement Trino answered with an error: ``message`` is what a Trino user sees."""

    def __init__(
        self, message: str, error_name: str, error_type: str, sql: str, causes: Sequence[str] = ()
    ) -> None:
        super().__init__(f"{error_name} ({error_type}): {message}\n-- in: {sql}\n-- causes: {list(causes)}")
        self.message = message
        self.error_name = error_name
        self.error_type = error_type
        # The messages of the exception's causes, outermost first: what `trino --debug` prints.
        self.causes = tuple(causes)


def trino_home() -> Path:
    """The installed Trino, or ``TrinoError`` saying how to install it."""
    cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    home = cache / "cedarberg" / f"trino-{TRINO_VERSION}"
    marker = home / ".complete"
    if not marker.is_file() or marker.read_text().strip() != TRINO_VERSION:
        raise TrinoError(
            f"Trino {TRINO_VERSION} is not installed in {home}: run scripts/install-test-deps.sh"
        )
    return home


def trino_java() -> Path:
    """The ``java`` of the first JDK >= 24 under /usr/lib/jvm (Trino 476 refuses older ones)."""
    for home in sorted(Path("/usr/lib/jvm").glob("*")):
        java = home / "bin" / "java"
        if not java.is_file() or home.is_symlink():
            continue
        done = subprocess.run(
            [str(java), "-version"], capture_output=True, text=True, timeout=60, check=False
        )
        match = JVM_JAVA_VERSION.search(done.stderr)
        if match and int(match.group(1)) >= TRINO_MIN_JAVA:
            return java
    raise TrinoError(f"no JDK >= {TRINO_MIN_JAVA} under /usr/lib/jvm: run scripts/install-test-deps.sh")


def rest_catalog_properties(
    uri: str,
    *,
    warehouse: str,
    credential: str | None = None,
    token: str | None = None,
    s3: Mapping[str, str] | None = None,
    local_root: Path | None = None,
    **extra: str,
) -> dict[str, str]:
    """The properties of an Iceberg REST catalog of Trino's pointing at a Cedarberg gateway.

    ``credential`` (``id:secret``) or ``token`` authenticate the catalog (OAuth2). ``s3``:
    ``endpoint`` and ``region`` of an S3 warehouse whose files Trino reads with vended credentials;
    ``local_root``: the directory under which a ``file://`` warehouse's files are. ``extra`` are
    added as given (full property names), e.g. ``{"iceberg.rest-catalog.session": "USER"}``.
    """
    props = {
        "iceberg.catalog.type": "rest",
        "iceberg.rest-catalog.uri": uri,
        "iceberg.rest-catalog.warehouse": warehouse,
        "iceberg.rest-catalog.nested-namespace-enabled": "true",
        "iceberg.rest-catalog.view-endpoints-enabled": "true",
        "iceberg.unique-table-location": "true",
    }
    if credential is not None or token is not None:
        props["iceberg.rest-catalog.security"] = "OAUTH2"
        props["iceberg.rest-catalog.oauth2.server-uri"] = f"{uri}/v1/oauth/tokens"
    if credential is not None:
        props["iceberg.rest-catalog.oauth2.credential"] = credential
    if token is not None:
        props["iceberg.rest-catalog.oauth2.token"] = token
    if s3 is not None:
        props |= {
            "iceberg.rest-catalog.vended-credentials-enabled": "true",
            "fs.native-s3.enabled": "true",
            "s3.endpoint": s3["endpoint"],
            "s3.region": s3["region"],
            "s3.path-style-access": "true",
        }
    if local_root is not None:
        props |= {"fs.native-local.enabled": "true", "local.location": str(local_root)}
    return props | dict(extra)


class TrinoServer:
    """One Trino coordinator process on a free loopback port; its output goes to ``log_path``."""

    def __init__(self, directory: Path, *, java_options: Sequence[str] = (), heap: str = "1G") -> None:
        self.directory = Path(directory).resolve()
        self.java_options = tuple(java_options)
        self.heap = heap
        self.port = free_port()
        self.log_path = self.directory / "server.log"
        self.process: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    # -- life cycle --------------------------------------------------------------------------

    def start(self) -> TrinoServer:
        """Start the coordinator and wait until it accepts queries; ``TrinoError`` otherwise."""
        home, java = trino_home(), trino_java()
        etc = self.directory / "etc"
        etc.mkdir(parents=True, exist_ok=True)
        _write_properties(
            etc / "config.properties",
            {
                "coordinator": "true",
                "node-scheduler.include-coordinator": "true",
                "http-server.http.port": str(self.port),
                "discovery.uri": self.url,
                "plugin.dir": str(home / "plugin"),
                "catalog.management": "dynamic",
                "catalog.store": "memory",
                "log.path": str(self.directory / "trino.log"),
                # Small: the tables are tiny, and the machine's 2 cores are shared with the suite.
                "query.max-memory": "400MB",
                "query.max-memory-per-node": "400MB",
                "task.concurrency": "2",
                "task.max-worker-threads": "4",
                "http-server.log.enabled": "false",
            },
        )
        (etc / "log.properties").write_text("io.trino=WARN\nio.airlift=WARN\n")
        command = [
            str(java),
            f"-Xmx{self.heap}",
            # A fast start over peak speed: no concurrent GC threads, no C2 compilation.
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-XX:+ExitOnOutOfMemoryError",
            "-Djdk.attach.allowAttachSelf=true",
            "-XX:+EnableDynamicAgentLoading",
            "-Dfile.encoding=UTF-8",
            "-Duser.timezone=UTC",
            # What Trino's launcher passes from node.properties: the node's identity.
            "-Dnode.environment=cedarberg_test",
            "-Dnode.id=coordinator",
            f"-Dnode.data-dir={self.directory / 'data'}",
            "-Dnode.internal-address=127.0.0.1",
            "-Dnode.bind-ip=127.0.0.1",
            f"-Dconfig={etc / 'config.properties'}",
            f"-Dlog.levels-file={etc / 'log.properties'}",
            *self.java_options,
            "-cp",
            str(home / "lib" / "*"),
            "io.trino.server.TrinoServer",
        ]
        self._log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=self.directory,
        )
        self._wait_ready()
        return self

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT
        while True:
            if self.process is None or self.process.poll() is not None:
                raise TrinoError(f"Trino exited before it was ready\n{self.log_tail()}")
            try:
                with urllib.request.urlopen(f"{self.url}/v1/info", timeout=2) as answer:
                    if not json.loads(answer.read()).get("starting", True):
                        return
            except (urllib.error.URLError, ConnectionError, TimeoutError, OSError):
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise TrinoError(f"Trino not ready after {READY_TIMEOUT} s\n{self.log_tail()}")
            time.sleep(0.5)

    def stop(self) -> None:
        """SIGTERM (Trino shuts down gracefully), then SIGKILL after ``STOP_TIMEOUT`` seconds."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=STOP_TIMEOUT)
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self) -> TrinoServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def log_tail(self, chars: int = 8000) -> str:
        """The end of the JVM's output and of Trino's own log (which it writes once started)."""
        parts = []
        for path in (self.log_path, self.directory / "trino.log"):
            if path.is_file():
                parts.append(f"--- {path} (tail) ---\n{path.read_text(errors='replace')[-chars:]}")
        return "\n".join(parts)

    # -- catalogs and queries ------------------------------------------------------------------

    def create_catalog(self, name: str, properties: Mapping[str, str]) -> None:
        """``CREATE CATALOG name USING iceberg WITH (...)``; a catalog of that name is dropped first."""
        self.query(f"DROP CATALOG IF EXISTS {name}")
        rendered = ", ".join(f'"{key}" = {_literal(value)}' for key, value in properties.items())
        self.query(f"CREATE CATALOG {name} USING iceberg WITH ({rendered})")

    def query(
        self,
        sql: str,
        *,
        user: str = "trino",
        extra_credentials: Mapping[str, str] | None = None,
        timeout: float = QUERY_TIMEOUT,
    ) -> list[list[Any]]:
        """Run ``sql`` as Trino user ``user`` through Trino's HTTP protocol; every row, in order.

        Raises ``TrinoQueryError`` with the message Trino shows its user when the query fails.
        ``extra_credentials`` travel as ``X-Trino-Extra-Credential`` (e.g. a user's own token).
        """
        headers = {"X-Trino-User": user, "X-Trino-Source": "cedarberg-tests", "Content-Type": "text/plain"}
        if extra_credentials:
            headers["X-Trino-Extra-Credential"] = ", ".join(
                f"{key}={urllib.parse.quote(value)}" for key, value in extra_credentials.items()
            )
        deadline = time.monotonic() + timeout
        answer = _call(
            urllib.request.Request(f"{self.url}/v1/statement", sql.encode(), headers, method="POST")
        )
        rows: list[list[Any]] = []
        while True:
            rows.extend(answer.get("data") or [])
            if "error" in answer:
                error = answer["error"]
                raise TrinoQueryError(
                    str(error.get("message", "")),
                    str(error.get("errorName")),
                    str(error.get("errorType")),
                    sql,
                    _cause_messages(error.get("failureInfo") or {}),
                )
            next_uri = answer.get("nextUri")
            if not next_uri:
                return rows
            if time.monotonic() > deadline:
                _call(urllib.request.Request(next_uri, headers=headers, method="DELETE"), expect_body=False)
                raise TrinoError(f"query still running after {timeout} s, cancelled: {sql}")
            answer = _call(urllib.request.Request(next_uri, headers=headers))


def _call(request: urllib.request.Request, *, expect_body: bool = True) -> dict[str, Any]:
    for attempt in range(20):
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                body = response.read()
                return dict(json.loads(body)) if expect_body and body else {}
        except urllib.error.HTTPError as exc:
            # The protocol asks clients to retry 502, 503 and 504 (a busy coordinator).
            if exc.code not in (502, 503, 504) or attempt == 19:
                raise TrinoError(f"Trino answered {exc.code}: {exc.read()[:2000]!r}") from None
            time.sleep(0.1 * (attempt + 1))
    raise AssertionError("unreachable")


def _cause_messages(failure: Mapping[str, Any]) -> list[str]:
    messages = []
    cause = failure.get("cause")
    while isinstance(cause, Mapping) and len(messages) < 20:
        messages.append(str(cause.get("message")))
        cause = cause.get("cause")
    return messages


def _literal(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _write_properties(path: Path, values: Mapping[str, str]) -> None:
    path.write_text("".join(f"{key}={value}\n" for key, value in values.items()))
