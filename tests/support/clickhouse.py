"""ClickHouse (chdb, embedded ClickHouse) as a client of the gateway, in a child process.

chdb runs ClickHouse inside the Python process that imports it, with process-wide state (one
session per process, its own thread pools, its own Arrow and AWS SDK). The tests keep it out of
the pytest process: ``ClickHouse()`` starts ``python -m tests.support.clickhouse``, which holds
one chdb session and answers one JSON line per statement. A statement that fails comes back as
``ClickHouseError`` with ClickHouse's own message.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Mapping
from typing import IO, Any

from tests.support.gateway import REPO_ROOT

# Session settings: the DataLakeCatalog database engine for REST catalogs and writes to Iceberg
# are beta in ClickHouse 26.9; tables that ClickHouse creates record full paths (s3://...) in
# their metadata, as other Iceberg clients expect; a failed S3 request is not retried 500 times.
SESSION_SETTINGS = {
    "allow_database_iceberg": 1,
    "allow_insert_into_iceberg": 1,
    "write_full_path_in_iceberg_metadata": 1,
    "s3_retry_attempts": 1,
}
STATEMENT_TIMEOUT = 60.0


class ClickHouseError(RuntimeError):
    """ClickHouse refused or failed a statement; the message is ClickHouse's."""


class ClickHouse:
    """One chdb session in a child process. ``query`` returns rows (lists), ``execute`` nothing.

    ``env`` adds to the child's environment, e.g. ``SSL_CERT_FILE``: the CA bundle ClickHouse's
    OpenSSL client trusts (chdb has no server configuration to set ``openSSL.client.caConfig`` in).
    """

    def __init__(self, env: Mapping[str, str] | None = None) -> None:
        self._process = subprocess.Popen(
            [sys.executable, "-m", "tests.support.clickhouse"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            cwd=REPO_ROOT,
            env={**os.environ, **(env or {})},
            text=True,
        )
        for name, value in SESSION_SETTINGS.items():
            self.execute(f"SET {name} = {value}")

    def query(self, sql: str) -> list[list[Any]]:
        answer = self._ask(sql)
        if "error" in answer:
            raise ClickHouseError(answer["error"])
        rows: list[list[Any]] = answer["rows"]
        return rows

    def execute(self, sql: str) -> None:
        self.query(sql)

    def _ask(self, sql: str) -> dict[str, Any]:
        stdin, stdout = self._pipes()
        stdin.write(json.dumps({"sql": sql}) + "\n")
        stdin.flush()
        line = stdout.readline()
        if not line:
            code = self._process.wait(timeout=STATEMENT_TIMEOUT)
            raise ClickHouseError(f"the chdb process exited ({code}) during: {sql}")
        answer: dict[str, Any] = json.loads(line)
        return answer

    def _pipes(self) -> tuple[IO[str], IO[str]]:
        if self._process.stdin is None or self._process.stdout is None:
            raise ClickHouseError("the chdb process has no pipes")
        return self._process.stdin, self._process.stdout

    def close(self) -> None:
        if self._process.stdin is not None:
            self._process.stdin.close()
        try:
            self._process.wait(timeout=STATEMENT_TIMEOUT)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.wait(timeout=STATEMENT_TIMEOUT)
        if self._process.stdout is not None:
            self._process.stdout.close()


def _serve() -> None:
    """The child: one chdb session, one JSON request line in, one JSON answer line out."""
    from chdb import session

    chdb_session = session.Session()
    for line in sys.stdin:
        sql = json.loads(line)["sql"]
        try:
            result = str(chdb_session.query(sql, "JSONCompact"))
            answer: dict[str, Any] = {"rows": json.loads(result)["data"] if result.strip() else []}
        except Exception as exc:  # every failure goes back to the test, which asserts on it
            answer = {"error": str(exc)}
        sys.stdout.write(json.dumps(answer) + "\n")
        sys.stdout.flush()
    chdb_session.close()


if __name__ == "__main__":
    _serve()
