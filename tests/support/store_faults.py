"""Helpers of the store fault tests (tests/e2e/test_faults_store.py): a recorded load of commits
and loads against a real gateway, and a check that a table's metadata files are complete.

`Load` runs `clients` threads; client i commits a new property `c<i>-<n>` to its own table `t<i>`
in namespace `load`, then loads that table, until stopped. Every request's outcome goes into a
`History` (what was sent, status, Iceberg error type and message, when, how long), which a failing
check prints whole so the run can be read and replayed.
"""

from __future__ import annotations

import asyncio
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import requests
from pyiceberg.table.metadata import TableMetadataUtil

from cedarberg.catalog import fileio, locations
from cedarberg.catalog.sealing import Sealer
from cedarberg.kms.keyring import KeyRing
from cedarberg.kms.settings import KmsSettings
from tests.support.gateway import GatewayProcess

NAMESPACE = "load"
MAX_METADATA_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True, slots=True)
class Outcome:
    """One request: who sent it, what (`key`: the property a commit set), how it ended (`status`
    0: no answer at all, a connection error or the client's timeout) and when (monotonic)."""

    client: int
    op: str  # "commit" or "load"
    key: str
    status: int
    error_type: str
    message: str
    started: float
    seconds: float


@dataclass
class History:
    outcomes: list[Outcome] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def add(self, outcome: Outcome) -> None:
        with self.lock:
            self.outcomes.append(outcome)

    def since(self, moment: float) -> list[Outcome]:
        with self.lock:
            return [o for o in self.outcomes if o.started >= moment]

    def commits(self) -> list[Outcome]:
        with self.lock:
            return [o for o in self.outcomes if o.op == "commit"]

    def dump(self) -> str:
        with self.lock:
            return "\n".join(
                f"{o.started:.3f} +{o.seconds:.3f}s client {o.client} {o.op} {o.key}: {o.status} "
                f"{o.error_type} {o.message}"
                for o in self.outcomes
            )

    def summary(self) -> str:
        """Counts by operation, status and error type."""
        counts: dict[tuple[str, int, str], int] = {}
        with self.lock:
            for o in self.outcomes:
                counts[(o.op, o.status, o.error_type)] = counts.get((o.op, o.status, o.error_type), 0) + 1
        return ", ".join(
            f"{op} {status} {kind or 'ok'}: {n}" for (op, status, kind), n in sorted(counts.items())
        )


def table_url(gw: GatewayProcess, table: str) -> str:
    return f"{gw.url}/v1/namespaces/{NAMESPACE}/tables/{table}"


def set_property(key: str) -> dict[str, Any]:
    """A commit that sets one property, with no requirement (it never conflicts with itself)."""
    return {"requirements": [], "updates": [{"action": "set-properties", "updates": {key: "1"}}]}


class Load:
    """`clients` threads committing and loading through `gw` until `stop` (see the module)."""

    def __init__(self, gw: GatewayProcess, clients: int, timeout: float) -> None:
        self.gw = gw
        self.clients = clients
        self.timeout = timeout
        self.history = History()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, args=(i,), daemon=True) for i in range(clients)]

    def start(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=self.timeout * 2)
            assert not thread.is_alive(), "a load client did not finish"

    def _run(self, client: int) -> None:
        url = table_url(self.gw, f"t{client}")
        with requests.Session() as session:
            n = 0
            while not self._stop.is_set():
                key = f"c{client}-{n}"
                self._send(client, "commit", key, session, "POST", url, set_property(key))
                self._send(client, "load", "", session, "GET", url, None)
                n += 1

    def _send(
        self,
        client: int,
        op: str,
        key: str,
        session: requests.Session,
        method: str,
        url: str,
        body: dict[str, Any] | None,
    ) -> None:
        started = time.monotonic()
        try:
            answer = session.request(method, url, json=body, timeout=self.timeout)
        except requests.RequestException as err:
            seconds = time.monotonic() - started
            self.history.add(Outcome(client, op, key, 0, type(err).__name__, "", started, seconds))
            return
        seconds = time.monotonic() - started
        error: dict[str, Any] = answer.json()["error"] if answer.status_code >= 400 else {}
        kind, message = str(error.get("type", "")), str(error.get("message", ""))
        self.history.add(Outcome(client, op, key, answer.status_code, kind, message, started, seconds))


def open_metadata_file(gw: GatewayProcess, warehouse: str, location: str) -> None:
    """Open the file at `location` as the gateway would (unsealed and checked when sealed, with the
    gateway's local key) and parse its table metadata: raises if it is partial or damaged."""
    content = fileio.read_file(location, MAX_METADATA_BYTES)

    async def unseal() -> bytes:
        keyring = KeyRing.open(KmsSettings(), gw.data_dir / "kms")
        try:
            return (await Sealer(keyring).open_file(warehouse, location, content)).metadata_json
        finally:
            await keyring.aclose()

    TableMetadataUtil.parse_raw(asyncio.run(unseal()))


def assert_only_complete_files(
    gw: GatewayProcess, base: str, warehouse: str, namespace: str, *, exact: bool = True
) -> None:
    """For every table of `namespace` (under the catalog URL `base`): its pointer names a complete
    file, and every file in its metadata directory is complete: nothing partial left behind.
    `exact`: the directory holds exactly the files its metadata log and pointer name (False where
    a commit of unknown outcome may have kept a complete file that nothing names)."""
    listed = requests.get(f"{base}/namespaces/{namespace}/tables", timeout=30)
    assert listed.status_code == 200, listed.text
    for identifier in listed.json()["identifiers"]:
        answer = requests.get(f"{base}/namespaces/{namespace}/tables/{identifier['name']}", timeout=30)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        pointer = body["metadata-location"]
        named = {locations.normalize(pointer)}
        named.update(
            locations.normalize(entry["metadata-file"]) for entry in body["metadata"]["metadata-log"]
        )
        directory = Path(locations.to_local_path(pointer)).parent
        on_disk = {locations.normalize(path.as_uri()) for path in directory.iterdir()}
        unnamed, missing = sorted(on_disk - named), sorted(named - on_disk)
        assert not missing, f"{identifier['name']}: files named but absent: {missing}"
        assert not (exact and unnamed), f"{identifier['name']}: files nothing names: {unnamed}"
        for location in on_disk:
            open_metadata_file(gw, warehouse, location)
