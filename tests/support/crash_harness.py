"""The crash harness: clients that mutate the catalog while gateway processes are SIGKILLed.

Each `Client` is a thread that owns its own namespaces (``c<i>...``) and everything in them, so
what it knows it did is the whole truth about its part of the catalog: after every kill the
checker (`tests.support.crash_checks`) compares the registry and the warehouse with the clients'
`Model`, and nothing another client does can explain a difference.

Every mutation carries an ``Idempotency-Key`` and an ``X-Request-ID`` of its own per attempt.
Each answer is recorded as the client saw it (`Attempt`): an acknowledgement, a refusal, or a
lost request (connection reset or refused by a killed process, or a timeout). A lost mutation is
settled in one of two ways, chosen by the seeded generator:

- *retried*: sent again with the same ``Idempotency-Key`` until a process answers; the answer
  must be the success a first run gives (the recorded outcome, or the one run now): a conflict or
  a "not found" there means the mutation ran twice or its record was lost;
- *resolved*: not retried; once one later write of the client is acknowledged (a barrier: the
  registry COMMIT under way when the request was lost has ended, see `Client._barrier`), the
  client reads what is there and requires the mutation to be wholly applied or wholly absent (a
  commit's property and its schema change together, a transaction's tables together, a rename's
  source xor its destination); the checker then requires it to stay so.

`Killer` SIGKILLs a worker (the supervisor forks a new one) or a whole gateway (supervisor and
workers at once, then restarted). A supervisor gives up after five worker deaths within a minute
(`gateway.serve.supervisor`), so at most four worker kills are made per gateway between two
whole-gateway kills.
"""

from __future__ import annotations

import json
import os
import random
import signal
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tests.support.gateway import GatewayProcess

SEED_ENV = "CEDARBERG_CRASH_SEED"
KILLS_ENV = "CEDARBERG_CRASH_KILLS"
ARTIFACTS = Path(__file__).resolve().parents[1] / ".artifacts" / "crash"
REQUEST_TIMEOUT = 20.0
LOST_RETRY_SECONDS = 60.0  # how long a lost request is retried while its gateway comes back
WORKER_KILLS_PER_SUPERVISOR = 4  # the supervisor's crash-loop guard allows five per minute


def seed_from_env() -> int:
    """The run's seed: `CEDARBERG_CRASH_SEED`, else a fresh one (printed by the test)."""
    value = os.environ.get(SEED_ENV)
    return int(value) if value else random.SystemRandom().randrange(1, 2**31)


def kills_from_env(default: int) -> int:
    value = os.environ.get(KILLS_ENV)
    return int(value) if value else default


class Violation(AssertionError):
    """What a client or the checker saw that the gateway promises cannot happen."""


@dataclass
class Attempt:
    request_id: str
    gateway: int
    started: float
    ended: float = 0.0
    status: int | None = None  # None: lost (reset, refused or timed out)
    error: str | None = None


@dataclass
class Operation:
    client: int
    number: int
    kind: str
    target: list[str]
    idempotency_key: str
    settle: str = ""  # "" (answered at once), "retried" or "resolved"
    outcome: str = ""  # "acknowledged" | "refused" | "applied" | "absent"
    attempts: list[Attempt] = field(default_factory=list)


@dataclass
class Model:
    """What one client knows it did: its namespaces, tables and views, and the markers (property
    keys) each acknowledged change put there; markers of changes it saw refused are `forbidden`."""

    namespaces: dict[str, set[str]] = field(default_factory=dict)
    tables: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    views: dict[tuple[str, str], set[str]] = field(default_factory=dict)
    forbidden: set[str] = field(default_factory=set)
    purged: list[str] = field(default_factory=list)  # locations of tables dropped with purge
    acknowledged: list[str] = field(default_factory=list)  # request ids of acknowledged mutations


class History:
    """Every client's operations in order, for the checker and, on failure, for replay."""

    def __init__(self, seed: int, label: str) -> None:
        self.seed = seed
        self.label = label
        self.operations: list[Operation] = []
        self.kills: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    def add(self, operation: Operation) -> None:
        with self.lock:
            self.operations.append(operation)

    def write(self, violations: list[str]) -> Path:
        """Write the history to ``tests/.artifacts/crash/<label>-<seed>.json``; returns the path."""
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{self.label}-{self.seed}.json"
        with self.lock:
            document = {
                "seed": self.seed,
                "label": self.label,
                "replay": f"{SEED_ENV}={self.seed}",
                "violations": violations,
                "kills": self.kills,
                "operations": [asdict(op) for op in self.operations],
            }
        path.write_text(json.dumps(document, indent=1, default=sorted))
        return path


class Pause:
    """Lets the checker stop every client between two operations and wait until all are idle."""

    def __init__(self, clients: int) -> None:
        self._condition = threading.Condition()
        self._paused = False
        self._idle = 0
        self._clients = clients

    @contextmanager
    def operation(self) -> Iterator[None]:
        with self._condition:
            while self._paused:
                self._idle += 1
                self._condition.notify_all()
                self._condition.wait()
                self._idle -= 1
        yield

    def leave(self) -> None:
        """A client that stops for good counts as idle from now on."""
        with self._condition:
            self._clients -= 1
            self._condition.notify_all()

    @contextmanager
    def paused(self, timeout: float = 180.0) -> Iterator[None]:
        with self._condition:
            self._paused = True
            if not self._condition.wait_for(lambda: self._idle >= self._clients, timeout):
                raise Violation(f"clients did not settle within {timeout:.0f} s")
        try:
            yield
        finally:
            with self._condition:
                self._paused = False
                self._condition.notify_all()


class Killer:
    """SIGKILLs gateway processes: a worker (replaced by its supervisor) or a whole gateway."""

    def __init__(
        self, gateways: list[GatewayProcess], workers: int, rng: random.Random, history: History
    ) -> None:
        self.gateways = gateways
        self.workers = workers
        self.rng = rng
        self.history = history
        self.kills = 0
        self._since_restart = [0] * len(gateways)

    def kill_one(self) -> None:
        """Kill a worker, or the whole of a gateway, and wait until it serves again."""
        index = self.rng.randrange(len(self.gateways))
        gateway = self.gateways[index]
        whole = self._since_restart[index] >= WORKER_KILLS_PER_SUPERVISOR or self.rng.random() < 0.05
        started = time.time()
        if whole:
            victims = _children(gateway)
            for pid in victims:  # the workers die with the supervisor, in the same instant
                os.kill(pid, signal.SIGKILL)
            gateway.kill()
            gateway.start()
            self._since_restart[index] = 0
        else:
            # A worker, or on SQLite the registry writer (`gateway.serve.registry_writer`): the
            # supervisor replaces either.
            children = _children(gateway)
            victims = [self.rng.choice(children)]
            os.kill(victims[0], signal.SIGKILL)
            self._wait_for_replacement(gateway, victims[0], len(children))
            self._since_restart[index] += 1
        self.kills += 1
        self.history.kills.append(
            {
                "at": started,
                "gateway": index,
                "whole": whole,
                "pids": victims,
                "back_after": time.time() - started,
            }
        )

    def _wait_for_replacement(self, gateway: GatewayProcess, dead: int, count: int) -> None:
        deadline = time.monotonic() + gateway.ready_timeout
        while time.monotonic() < deadline:
            children = _children(gateway)
            if len(children) == count and dead not in children:
                gateway.wait_ready()
                return
            time.sleep(0.01)
        tail = gateway.log_text()[-3000:]
        waited = gateway.ready_timeout
        raise Violation(f"gateway {gateway.url}: no new worker {waited:.0f} s after a kill\n{tail}")


def _children(gateway: GatewayProcess) -> list[int]:
    """The processes of a gateway's supervisor: its workers and, on SQLite, its registry writer."""
    pid = gateway.pid
    assert pid is not None, f"gateway {gateway.url} was never started"
    assert gateway.is_running(), f"gateway {gateway.url} is not running"
    return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
