"""Clients that commit to and load Iceberg tables over the REST API and record what they saw.

Each operation is recorded with its invocation and completion on `time.monotonic()` (one host, one
clock for all clients) and its outcome, for the checker in tests/support/linearizability.py:

- a commit appends one snapshot per table with the requirements Java's and pyiceberg's appends
  send (`assert-table-uuid`, `assert-ref-snapshot-id` on `main`) and the updates they send
  (`add-snapshot` on top of the loaded `main`, `set-snapshot-ref main`): on one table through
  `POST .../tables/{t}`, on several through `POST .../transactions/commit`. Its snapshot ids are
  chosen here, so a snapshot in the final table names its commit. Outcome: 200/204 `ack`, 409
  `conflict`, no answer in time or a broken connection `timeout`, any other answer `failed`;
- a load is `GET .../tables/{t}`, recorded with `main`'s chain as the answer shows it.
"""

from __future__ import annotations

import random
import threading
import time
import urllib.parse
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import requests

from tests.support.linearizability import Commit, FinalTable, History, Load, Outcome

NAMESPACE = "lin"
SCHEMA = {"type": "struct", "fields": [{"id": 1, "name": "id", "type": "long", "required": False}]}
PATIENT_SECONDS = 60.0
ANSWERS: dict[int, Outcome] = {200: "ack", 204: "ack", 409: "conflict"}


def table_url(base: str, table: str) -> str:
    return f"{base}/v1/namespaces/{NAMESPACE}/tables/{urllib.parse.quote(table, safe='')}"


def main_chain(metadata: Mapping[str, Any]) -> list[int]:
    """Snapshot ids of `main`, oldest first, following parent ids from the ref."""
    snapshots = {s["snapshot-id"]: s for s in metadata.get("snapshots", [])}
    ref = metadata.get("refs", {}).get("main")
    chain: list[int] = []
    snapshot_id = ref["snapshot-id"] if ref else None
    while snapshot_id is not None and snapshot_id in snapshots and len(chain) <= len(snapshots):
        chain.append(snapshot_id)
        snapshot_id = snapshots[snapshot_id].get("parent-snapshot-id")
    chain.reverse()
    return chain


def final_table(metadata: Mapping[str, Any]) -> FinalTable:
    return FinalTable(
        chain=main_chain(metadata),
        snapshots=[s["snapshot-id"] for s in metadata.get("snapshots", [])],
        snapshot_log=[entry["snapshot-id"] for entry in metadata.get("snapshot-log", [])],
    )


def create_tables(base: str, tables: Sequence[str]) -> None:
    with requests.Session() as http:
        answer = http.post(f"{base}/v1/namespaces", json={"namespace": [NAMESPACE]}, timeout=PATIENT_SECONDS)
        assert answer.status_code == 200, answer.text
        for table in tables:
            body: dict[str, Any] = {"name": table, "schema": SCHEMA}
            answer = http.post(f"{base}/v1/namespaces/{NAMESPACE}/tables", json=body, timeout=PATIENT_SECONDS)
            assert answer.status_code == 200, answer.text


@dataclass(frozen=True)
class Workload:
    """What each client does: `operations` steps, each a load (probability `loads`), a commit on
    one table, or (probability `transactions`) a commit on two tables at once; a commit waits
    `impatient_seconds`-ish instead of patiently with probability `impatient`, and one answered
    409 is retried (reloaded, committed again) up to `attempts` times in all."""

    tables: Sequence[str]
    operations: int
    loads: float = 0.2
    transactions: float = 0.15
    impatient: float = 0.1
    impatient_seconds: tuple[float, float] = (0.002, 0.03)
    attempts: int = 4


class Recorder:
    """The shared history; clients append to it under a lock."""

    def __init__(self, seed: int) -> None:
        self.history = History(seed=seed)
        self._lock = threading.Lock()

    def add(self, operation: Commit | Load) -> None:
        with self._lock:
            if isinstance(operation, Commit):
                self.history.commits.append(operation)
            else:
                self.history.loads.append(operation)


class Client:
    """One client, hopping between gateway instances at random (seeded) as behind a balancer."""

    def __init__(self, number: int, seed: int, gateways: Sequence[str], recorder: Recorder) -> None:
        self.number = number
        self.rng = random.Random(f"{seed}/{number}")
        self.gateways = list(gateways)
        self.recorder = recorder
        self.http = requests.Session()
        self._count = 0

    def _op(self, kind: str) -> str:
        self._count += 1
        return f"{kind}{self.number}.{self._count}"

    def run(self, workload: Workload) -> None:
        try:
            for _ in range(workload.operations):
                roll = self.rng.random()
                if roll < workload.loads:
                    self.load(self.rng.choice(self.gateways), self.rng.choice(workload.tables))
                    continue
                count = 2 if roll < workload.loads + workload.transactions else 1
                tables = self.rng.sample(list(workload.tables), count)
                patience = PATIENT_SECONDS
                if self.rng.random() < workload.impatient:
                    patience = self.rng.uniform(*workload.impatient_seconds)
                # As Iceberg's clients do: a commit that lost a race is reloaded and retried.
                for _attempt in range(workload.attempts):
                    if self.commit(tables, patience) != "conflict":
                        break
        finally:
            self.http.close()

    def load(self, base: str, table: str) -> dict[str, Any]:
        """Load `table` and record the load; raises on anything but 200 (loads must not fail)."""
        op = self._op("l")
        invoked = time.monotonic()
        answer = self.http.get(table_url(base, table), timeout=PATIENT_SECONDS)
        completed = time.monotonic()
        assert answer.status_code == 200, f"{op}: {answer.status_code} {answer.text[:500]}"
        body: dict[str, Any] = answer.json()
        observed = main_chain(body["metadata"])
        self.recorder.add(Load(op, self.number, table, observed, invoked, completed))
        return body

    def commit(self, tables: Sequence[str], patience: float) -> Outcome:
        """Load each table, then append one snapshot to each in one commit; record it and
        return its outcome."""
        op = self._op("c")
        serial = self._count  # snapshot ids unique per client and commit, never reused
        changes = []
        snapshots: dict[str, int] = {}
        for position, table in enumerate(tables):
            metadata = self.load(self.rng.choice(self.gateways), table)["metadata"]
            snapshot_id = (self.number + 1) * 10**12 + serial * 10 + position
            snapshots[table] = snapshot_id
            changes.append(self._change(table, metadata, snapshot_id, op))
        base = self.rng.choice(self.gateways)
        if len(changes) == 1:
            url, body = table_url(base, tables[0]), {k: v for k, v in changes[0].items() if k != "identifier"}
        else:
            url, body = f"{base}/v1/transactions/commit", {"table-changes": changes}
        invoked = time.monotonic()
        outcome: Outcome
        completed: float | None
        try:
            answer = self.http.post(url, json=body, timeout=patience)
        except (requests.Timeout, requests.ConnectionError) as err:
            completed, outcome, detail = None, "timeout", type(err).__name__
            # The connection may be mid-request: start afresh.
            self.http.close()
            self.http = requests.Session()
        else:
            completed = time.monotonic()
            outcome = ANSWERS.get(answer.status_code, "failed")
            detail = "" if outcome == "ack" else f"{answer.status_code} {answer.text[:300]}"
        self.recorder.add(Commit(op, self.number, snapshots, invoked, completed, outcome, detail))
        return outcome

    @staticmethod
    def _change(table: str, metadata: Mapping[str, Any], snapshot_id: int, op: str) -> dict[str, Any]:
        main = metadata.get("refs", {}).get("main")
        parent = main["snapshot-id"] if main else None
        snapshot: dict[str, Any] = {
            "snapshot-id": snapshot_id,
            "sequence-number": metadata["last-sequence-number"] + 1,
            "timestamp-ms": int(time.time() * 1000),
            "manifest-list": f"{metadata['location']}/metadata/snap-{snapshot_id}-1-{op}.avro",
            "summary": {"operation": "append", "cedarberg.test-op": op},
            "schema-id": metadata["current-schema-id"],
        }
        if parent is not None:
            snapshot["parent-snapshot-id"] = parent
        return {
            "identifier": {"namespace": [NAMESPACE], "name": table},
            "requirements": [
                {"type": "assert-table-uuid", "uuid": metadata["table-uuid"]},
                {"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": parent},
            ],
            "updates": [
                {"action": "add-snapshot", "snapshot": snapshot},
                {
                    "action": "set-snapshot-ref",
                    "ref-name": "main",
                    "snapshot-id": snapshot_id,
                    "type": "branch",
                },
            ],
        }
