"""The crash harness's clients: threads that mutate the catalog while its processes are killed.

Each `Client` owns its own namespaces (``c<i>...``) and everything in them, so its `Model` is the
whole truth about its part of the catalog. Every mutation carries an ``Idempotency-Key`` and an
``X-Request-ID`` of its own per attempt; a lost one (connection reset or refused by a killed
process, or timed out) is settled as `tests.support.crash_harness` describes: retried with the
same key, or resolved by reading what is there.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

import requests

from tests.support.crash_harness import (
    LOST_RETRY_SECONDS,
    REQUEST_TIMEOUT,
    Attempt,
    History,
    Model,
    Operation,
    Pause,
    Violation,
)
from tests.support.gateway import GatewayProcess

SCHEMA_FIELD = {"id": 1, "name": "id", "type": "long", "required": False}
VIEW_VERSION = {
    "version-id": 1,
    "schema-id": 0,
    "timestamp-ms": 1,
    "summary": {},
    "representations": [{"type": "sql", "sql": "select 1", "dialect": "spark"}],
    "default-namespace": [],
}
_STALE_SNAPSHOT = 12345  # no table's main branch has this snapshot: its requirement fails


class Client(threading.Thread):
    """One writer with its own namespaces; see the module docstring."""

    def __init__(
        self, number: int, gateways: list[GatewayProcess], seed: int, history: History, pause: Pause
    ) -> None:
        super().__init__(name=f"crash-client-{number}", daemon=True)
        self.number = number
        self.gateways = gateways
        self.rng = random.Random(seed * 1000 + number)
        self.history = history
        self.pause = pause
        self.model = Model()
        self.stop = threading.Event()
        self.violations: list[str] = []
        self.error: BaseException | None = None
        self._session = requests.Session()
        self._count = 0
        self._home = f"c{number}"

    # -- the loop ------------------------------------------------------------------------------
    def run(self) -> None:
        try:
            while not self.stop.is_set():
                with self.pause.operation():
                    if self.stop.is_set():
                        break
                    self._one_operation()
        except BaseException as err:  # reported by the test as a failure, never swallowed
            self.error = err
        finally:
            self.pause.leave()
            self._session.close()

    def _one_operation(self) -> None:
        m = self.model
        namespaces = sorted(m.namespaces)
        tables, views = sorted(m.tables), sorted(m.views)
        choices: list[tuple[int, Callable[[], None]]] = [
            (3 if len(namespaces) < 3 else 1, self._create_namespace)
        ]
        if namespaces:
            choices += [(1, self._update_namespace), (4 if len(tables) < 6 else 1, self._create_table)]
            choices += [(2 if len(views) < 3 else 1, self._create_view)]
            if any(not self._holds(ns) for ns in namespaces) and len(namespaces) > 1:
                choices.append((1, self._drop_namespace))
        if tables:
            choices += [(10, self._commit_table), (2, self._rename_table), (2, self._drop_table)]
        if len(tables) >= 2:
            choices += [(4, self._commit_transaction), (1, self._failing_transaction)]
        if views:
            choices += [(3, self._commit_view), (1, self._rename_view), (1, self._drop_view)]
        weights = [weight for weight, _ in choices]
        self.rng.choices([action for _, action in choices], weights)[0]()

    def _holds(self, namespace: str) -> bool:
        m = self.model
        return any(ns == namespace for ns, _ in [*m.tables, *m.views])

    def _marker(self) -> str:
        self._count += 1
        return f"m-{self.number}-{self._count}"

    def _new_name(self, prefix: str) -> str:
        self._count += 1
        return f"{prefix}{self._count}"

    # -- operations ----------------------------------------------------------------------------
    def _create_namespace(self) -> None:
        name, marker = f"{self._home}n{self._new_name('')}", self._marker()
        body = {"namespace": [name], "properties": {marker: "1"}}
        op = self._mutate("create-namespace", [name], "POST", "/v1/namespaces", body, 200)
        if self._applied(op, lambda: self._namespace_properties(name) is not None):
            found = self._namespace_properties(name)
            self._require(
                found is not None and marker in found, op, "namespace created without its properties"
            )
            self.model.namespaces[name] = {marker}

    def _update_namespace(self) -> None:
        name, marker = self.rng.choice(sorted(self.model.namespaces)), self._marker()
        body = {"updates": {marker: "1"}, "removals": []}
        op = self._mutate("update-namespace", [name], "POST", f"/v1/namespaces/{name}/properties", body, 200)
        if self._applied(op, lambda: marker in (self._namespace_properties(name) or {})):
            self.model.namespaces[name].add(marker)
        else:
            self.model.forbidden.add(marker)

    def _drop_namespace(self) -> None:
        empty = [ns for ns in sorted(self.model.namespaces) if not self._holds(ns)]
        name = self.rng.choice(empty)
        op = self._mutate("drop-namespace", [name], "DELETE", f"/v1/namespaces/{name}", None, 204)
        if self._applied(op, lambda: self._namespace_properties(name) is None):
            del self.model.namespaces[name]

    def _create_table(self) -> None:
        namespace, name, marker = (
            self.rng.choice(sorted(self.model.namespaces)),
            self._new_name("t"),
            self._marker(),
        )
        body = {
            "name": name,
            "schema": {"type": "struct", "fields": [SCHEMA_FIELD]},
            "properties": {marker: "1"},
        }
        op = self._mutate(
            "create-table", [namespace, name], "POST", f"/v1/namespaces/{namespace}/tables", body, 200
        )
        if self._applied(op, lambda: self._load("tables", namespace, name) is not None):
            loaded = self._load("tables", namespace, name)
            self._require(
                loaded is not None and marker in loaded["properties"], op, "table without its properties"
            )
            self.model.tables[(namespace, name)] = {marker}

    def _commit_table(self) -> None:
        namespace, name = self.rng.choice(sorted(self.model.tables))
        loaded = self._load("tables", namespace, name)
        if loaded is None:
            raise Violation(f"client {self.number}: acknowledged table {namespace}.{name} cannot be loaded")
        marker = self._marker()
        schema_id, last_column = int(loaded["current-schema-id"]), int(loaded["last-column-id"])
        current = next(s for s in loaded["schemas"] if s["schema-id"] == schema_id)
        column = {"id": last_column + 1, "name": marker, "type": "long", "required": False}
        # The schema change makes the commit one that cannot run twice: a second run fails its
        # requirement. Property and column must land together or not at all.
        body = {
            "requirements": [
                {"type": "assert-table-uuid", "uuid": loaded["table-uuid"]},
                {"type": "assert-current-schema-id", "current-schema-id": schema_id},
            ],
            "updates": [
                {
                    "action": "add-schema",
                    "schema": {
                        "type": "struct",
                        "schema-id": schema_id + 1,
                        "fields": [*current["fields"], column],
                    },
                    "last-column-id": last_column + 1,
                },
                {"action": "set-current-schema", "schema-id": -1},
                {"action": "set-properties", "updates": {marker: "1"}},
            ],
        }
        path = f"/v1/namespaces/{namespace}/tables/{name}"
        op = self._mutate("commit-table", [namespace, name, marker], "POST", path, body, 200)

        def landed() -> bool:
            after = self._load("tables", namespace, name)
            assert after is not None
            has_property = marker in after["properties"]
            has_column = any(f["name"] == marker for s in after["schemas"] for f in s["fields"])
            self._require(has_property == has_column, op, "a commit applied in part")
            return has_property

        if self._applied(op, landed):
            self.model.tables[(namespace, name)].add(marker)
        else:
            self.model.forbidden.add(marker)

    def _commit_transaction(self, failing: bool = False) -> None:
        chosen = self.rng.sample(
            sorted(self.model.tables), min(len(self.model.tables), self.rng.randint(2, 3))
        )
        marker = self._marker()
        changes = []
        for index, (namespace, name) in enumerate(chosen):
            requirements: list[dict[str, Any]] = []
            if failing and index == len(chosen) - 1:
                requirements = [
                    {"type": "assert-ref-snapshot-id", "ref": "main", "snapshot-id": _STALE_SNAPSHOT}
                ]
            changes.append(
                {
                    "identifier": {"namespace": [namespace], "name": name},
                    "requirements": requirements,
                    "updates": [{"action": "set-properties", "updates": {marker: "1"}}],
                }
            )
        target = [marker, *(f"{ns}.{n}" for ns, n in chosen)]
        kind = "failing-transaction" if failing else "transaction"
        op = self._mutate(
            kind,
            target,
            "POST",
            "/v1/transactions/commit",
            {"table-changes": changes},
            409 if failing else 204,
        )

        def landed() -> bool:
            present = [
                marker in (self._load("tables", ns, n) or {}).get("properties", {}) for ns, n in chosen
            ]
            self._require(
                all(present) or not any(present), op, f"a transaction applied to some tables: {present}"
            )
            return all(present)

        if not failing and self._applied(op, landed):
            for key in chosen:
                self.model.tables[key].add(marker)
        else:
            if failing and op.settle == "resolved":
                self._require(not landed(), op, "a transaction answered 409 was applied")
            self.model.forbidden.add(marker)

    def _failing_transaction(self) -> None:
        self._commit_transaction(failing=True)

    def _rename_table(self) -> None:
        self._rename("tables", self.model.tables)

    def _rename_view(self) -> None:
        self._rename("views", self.model.views)

    def _rename(self, kind: str, objects: dict[tuple[str, str], set[str]]) -> None:
        source = self.rng.choice(sorted(objects))
        destination = (self.rng.choice(sorted(self.model.namespaces)), self._new_name(source[1][0]))
        body = {
            "source": {"namespace": [source[0]], "name": source[1]},
            "destination": {"namespace": [destination[0]], "name": destination[1]},
        }
        target = [".".join(source), ".".join(destination)]
        op = self._mutate(f"rename-{kind[:-1]}", target, "POST", f"/v1/{kind}/rename", body, 204)

        def landed() -> bool:
            there = self._load(kind, *destination) is not None
            self._require(
                there != (self._load(kind, *source) is not None), op, "a rename left both or neither"
            )
            return there

        if self._applied(op, landed):
            objects[destination] = objects.pop(source)

    def _drop_table(self) -> None:
        namespace, name = self.rng.choice(sorted(self.model.tables))
        loaded = self._load("tables", namespace, name)
        assert loaded is not None, f"{namespace}.{name} vanished"
        path = f"/v1/namespaces/{namespace}/tables/{name}?purgeRequested=true"
        op = self._mutate("drop-table", [namespace, name], "DELETE", path, None, 204)
        if self._applied(op, lambda: self._load("tables", namespace, name) is None):
            del self.model.tables[(namespace, name)]
            self.model.purged.append(str(loaded["location"]))

    def _create_view(self) -> None:
        namespace, name, marker = (
            self.rng.choice(sorted(self.model.namespaces)),
            self._new_name("v"),
            self._marker(),
        )
        version = {**VIEW_VERSION, "default-namespace": [namespace]}
        body = {
            "name": name,
            "schema": {"type": "struct", "schema-id": 0, "fields": [SCHEMA_FIELD]},
            "view-version": version,
            "properties": {marker: "1"},
        }
        op = self._mutate(
            "create-view", [namespace, name], "POST", f"/v1/namespaces/{namespace}/views", body, 200
        )
        if self._applied(op, lambda: self._load("views", namespace, name) is not None):
            loaded = self._load("views", namespace, name)
            self._require(
                loaded is not None and marker in loaded["properties"], op, "view without its properties"
            )
            self.model.views[(namespace, name)] = {marker}

    def _commit_view(self) -> None:
        namespace, name = self.rng.choice(sorted(self.model.views))
        marker = self._marker()
        body = {"requirements": [], "updates": [{"action": "set-properties", "updates": {marker: "1"}}]}
        path = f"/v1/namespaces/{namespace}/views/{name}"
        op = self._mutate("commit-view", [namespace, name, marker], "POST", path, body, 200)
        landed = lambda: marker in (self._load("views", namespace, name) or {}).get("properties", {})  # noqa: E731
        if self._applied(op, landed):
            self.model.views[(namespace, name)].add(marker)
        else:
            self.model.forbidden.add(marker)

    def _drop_view(self) -> None:
        namespace, name = self.rng.choice(sorted(self.model.views))
        op = self._mutate(
            "drop-view", [namespace, name], "DELETE", f"/v1/namespaces/{namespace}/views/{name}", None, 204
        )
        if self._applied(op, lambda: self._load("views", namespace, name) is None):
            del self.model.views[(namespace, name)]

    # -- requests --------------------------------------------------------------------------------
    def _mutate(
        self,
        kind: str,
        target: list[str],
        method: str,
        path: str,
        body: Any,
        expected: int,
        settle: str | None = None,
    ) -> Operation:
        """Send a mutation, settle it if it was lost (as `settle` says, else as the generator
        chooses), and record what the client saw."""
        op = Operation(self.number, self._count, kind, target, str(uuid.uuid4()))
        self.history.add(op)
        status = self._attempt(op, method, path, body)
        if status is None or status >= 500:
            op.settle = settle or self.rng.choice(["retried", "resolved"])
            if op.settle == "retried":
                status = self._retry(op, method, path, body)
        if op.settle != "resolved":
            self._require(status == expected, op, f"answered {status}, expected {expected}")
            if status != expected:
                op.outcome = f"answered {status}"
            elif expected < 300:
                op.outcome = "acknowledged"
                self.model.acknowledged.append(op.attempts[-1].request_id)
            else:
                op.outcome = "refused"
        return op

    def _applied(self, op: Operation, landed: Callable[[], bool]) -> bool:
        """Whether `op` took effect: its acknowledgement, or (resolved) what is there once the
        registry COMMIT under way when it was lost has ended (`_barrier`)."""
        if op.settle != "resolved":
            return op.outcome == "acknowledged"
        self._barrier(op)
        applied = landed()
        op.outcome = "applied" if applied else "absent"
        return applied

    def _barrier(self, lost: Operation) -> None:
        """One write acknowledged after `lost` was lost, before it is resolved by reading.

        A lost change lands, if at all, by the end of the registry COMMIT under way when its
        process died, and that COMMIT is not undone: a read at once can come before its end and
        see the change absent, a sync before it appears (docs/operations.md, "What a crash cannot
        lose"). On SQLite every write of the gateway is committed by its one writer, one COMMIT
        after another, so once a later write is acknowledged that COMMIT has ended and what is
        read is final (on PostgreSQL, where the server finishes a commit it has begun in a few
        milliseconds, the write only lets that time pass). The write is a namespace change this
        client records like any other (retried until answered).
        """
        spare = [name for name in sorted(self.model.namespaces) if name not in lost.target]
        marker = self._marker()
        if spare:
            name = self.rng.choice(spare)
            body: dict[str, Any] = {"updates": {marker: "1"}, "removals": []}
            path = f"/v1/namespaces/{name}/properties"
            op = self._mutate("barrier", [name], "POST", path, body, 200, settle="retried")
            if op.outcome == "acknowledged":
                self.model.namespaces[name].add(marker)
            return
        name = f"{self._home}n{self._new_name('')}"
        body = {"namespace": [name], "properties": {marker: "1"}}
        op = self._mutate("barrier", [name], "POST", "/v1/namespaces", body, 200, settle="retried")
        if op.outcome == "acknowledged":
            self.model.namespaces[name] = {marker}

    def _attempt(self, op: Operation, method: str, path: str, body: Any) -> int | None:
        index = self.rng.randrange(len(self.gateways))
        attempt = Attempt(f"crash-{op.idempotency_key[:8]}-{len(op.attempts)}", index, time.time())
        op.attempts.append(attempt)
        headers = {"Idempotency-Key": op.idempotency_key, "X-Request-ID": attempt.request_id}
        try:
            answer = self._session.request(
                method, self.gateways[index].url + path, json=body, headers=headers, timeout=REQUEST_TIMEOUT
            )
            attempt.status = answer.status_code
            if answer.status_code >= 400:
                attempt.error = answer.text[:300]
        except requests.RequestException as err:
            attempt.error = f"{type(err).__name__}: {str(err)[:200]}"
            self._session.close()  # its pooled connections may lead to a dead process
            self._session = requests.Session()
        finally:
            attempt.ended = time.time()
        return attempt.status

    def _retry(self, op: Operation, method: str, path: str, body: Any) -> int | None:
        deadline = time.monotonic() + LOST_RETRY_SECONDS
        status: int | None = None
        while time.monotonic() < deadline:
            time.sleep(0.05)
            status = self._attempt(op, method, path, body)
            if status is not None and status < 500:
                return status
        return status

    def _read(self, path: str) -> requests.Response:
        """GET, retried while the gateways restart (reads are never lost, only delayed)."""
        deadline = time.monotonic() + LOST_RETRY_SECONDS
        while True:
            gateway = self.gateways[self.rng.randrange(len(self.gateways))]
            try:
                answer = self._session.get(gateway.url + path, timeout=REQUEST_TIMEOUT)
                if answer.status_code < 500:
                    return answer
            except requests.RequestException:
                self._session.close()
                self._session = requests.Session()
            if time.monotonic() > deadline:
                raise Violation(f"client {self.number}: GET {path} unanswered for {LOST_RETRY_SECONDS:.0f} s")
            time.sleep(0.05)

    def _load(self, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        answer = self._read(f"/v1/namespaces/{namespace}/{kind}/{name}")
        if answer.status_code == 404:
            return None
        if answer.status_code != 200:
            raise Violation(f"client {self.number}: loading {namespace}.{name} answered {answer.status_code}")
        metadata: dict[str, Any] = answer.json()["metadata"]
        return metadata

    def _namespace_properties(self, name: str) -> dict[str, str] | None:
        answer = self._read(f"/v1/namespaces/{name}")
        if answer.status_code == 404:
            return None
        properties: dict[str, str] = answer.json()["properties"]
        return properties

    def _require(self, condition: bool, op: Operation, what: str) -> None:
        if not condition:
            self.violations.append(
                f"client {self.number}, {op.kind} {op.target} ({op.settle or 'answered'}): {what}"
            )
