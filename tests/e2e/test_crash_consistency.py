"""Nothing acknowledged is lost when gateway processes die: SIGKILL at random moments under load.

Clients (`tests.support.crash_harness.Client`) create, commit, rename and drop (with purge)
tables and views, commit multi-table transactions (some made to fail) and change namespaces,
while a `Killer` SIGKILLs a worker process (its supervisor forks another) or a whole gateway
(restarted), every `LOAD_SECONDS` of load. After every kill the clients are paused and
`tests.support.crash_checks.Checker` checks the registry, the warehouse and the audit logs
against what the clients saw (its docstring lists the invariants); once the load stops, a final
check also waits for every purge and requires the purged files to be gone.

Two deployments: one gateway on SQLite, and two gateways on one PostgreSQL database (clients
send each request, and each retry, to either). Each gateway runs two workers.

The seed is printed and settable (``CEDARBERG_CRASH_SEED``), as is the number of kills per
deployment (``CEDARBERG_CRASH_KILLS``, default `KILLS`; ``make soak`` runs 1,500 each). A run
with a violation fails with its seed and writes its history (every operation, attempt, answer and
kill) to ``tests/.artifacts/crash/<deployment>-<seed>.json``; every run writes its figures to
``tests/.artifacts/crash/<deployment>-<seed>-figures.json``.
"""

from __future__ import annotations

import json
import math
import os
import random
import sqlite3
import time
import urllib.parse
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path
from typing import Any

import pytest
import requests

from tests.support.crash_checks import Checker
from tests.support.crash_client import Client
from tests.support.crash_harness import (
    ARTIFACTS,
    SEED_ENV,
    History,
    Killer,
    Model,
    Pause,
    kills_from_env,
    seed_from_env,
)
from tests.support.gateway import GatewayProcess
from tests.support.postgres import PostgresServer

KILLS = 150  # per deployment: 300 in `make test`
MINUTES_ENV = "CEDARBERG_CRASH_MINUTES"  # optional: stop killing after this long (then check all)
CLIENTS = 4
WORKERS = 2
LOAD_SECONDS = (0.25, 0.45)
# How long a restarted gateway may take to answer: a crowded machine (load 50 on 2 cores) has
# taken longer than the suite's usual 30 s, which is no finding about what a crash loses.
RESTART_SECONDS = 120.0
# A purge a kill interrupts counts as an attempt: the next waits the retry delay (60 s by default),
# shortened here so that the checker's deadline (`crash_checks.PURGE_SECONDS`) can require it.
# Clients read what they just wrote through any process: the registry cache lets a process see
# another's writes only within its TTL (by design, `catalog.store.cache`), which this harness
# would take for a lost write. Durability is what is checked here, so every read goes to the registry.
# The suite's 300 s per test is for one behaviour; a crash run is bounded by its kills instead
# (a loaded machine restarts gateways slowly), so `make soak` needs no other setting.
pytestmark = pytest.mark.timeout(180 + 5 * kills_from_env(KILLS))
NO_REGISTRY_CACHE = {"registry_ttl_seconds": 0}
PURGE_RETRIES = {"purge_retry_initial_seconds": 1.0, "purge_retry_max_seconds": 4.0}


def _gateways(tmp_path: Path, count: int, store_url: str | None) -> list[GatewayProcess]:
    data_dir = tmp_path / "shared"  # one warehouse and one local KEK for all instances
    gateways = []
    for index in range(count):
        audit = {"destination": str(tmp_path / f"audit-{index}.jsonl"), "durability": "fsync"}
        gateway = GatewayProcess(
            data_dir,
            store_url=store_url,
            config={"workers": WORKERS, "audit": audit, "cache": NO_REGISTRY_CACHE, **PURGE_RETRIES},
            log_path=tmp_path / f"gateway-{index}.log",
            ready_timeout=RESTART_SECONDS,
        )
        gateway.config_path = tmp_path / f"gateway-{index}.toml"
        gateways.append(gateway)
    return gateways


@contextmanager
def _running(gateways: list[GatewayProcess]) -> Iterator[None]:
    with ExitStack() as stack:
        for gateway in gateways:
            stack.enter_context(gateway)
        yield


def _run(label: str, gateways: list[GatewayProcess], checker: Checker) -> None:
    seed, kills = seed_from_env(), kills_from_env(KILLS)
    print(f"crash run {label}: seed {seed} ({SEED_ENV}={seed} replays it), {kills} kills")
    history = History(seed, label)
    rng = random.Random(seed)
    pause = Pause(CLIENTS)
    clients = [Client(i, gateways, seed, history, pause) for i in range(CLIENTS)]
    killer = Killer(gateways, WORKERS, rng, history)
    violations: list[str] = []
    started = time.monotonic()
    minutes = os.environ.get(MINUTES_ENV)
    stop_at = started + float(minutes) * 60 if minutes else math.inf
    try:
        for client in clients:
            client.start()
        while killer.kills < kills and not violations and time.monotonic() < stop_at:
            time.sleep(rng.uniform(*LOAD_SECONDS))
            killer.kill_one()
            with pause.paused():
                violations += [v for c in clients for v in c.violations]
                violations += checker.check(c.model for c in clients)
                for client in clients:
                    if client.error is not None:
                        raise client.error
            if killer.kills % 10 == 0:
                _write_figures(label, history, killer, checker, violations, started, final=False)
    finally:
        for client in clients:
            client.stop.set()
        for client in clients:
            client.join(timeout=120)
    if not violations:
        violations += [v for c in clients for v in c.violations]
        violations += checker.check((c.model for c in clients), final=True)
    for client in clients:
        if client.error is not None:
            raise client.error
    _write_figures(label, history, killer, checker, violations, started, final=True)
    if violations:
        path = history.write(violations)
        shown = "\n".join(violations[:20])
        pytest.fail(f"{len(violations)} violation(s), seed {seed}, history in {path}:\n{shown}")
    if minutes:
        kills = min(kills, killer.kills)  # a time-bounded run (`make soak`) stops when time is up
    assert killer.kills >= kills
    assert checker.figures.checks >= kills


def _write_figures(
    label: str,
    history: History,
    killer: Killer,
    checker: Checker,
    violations: list[str],
    started: float,
    *,
    final: bool,
) -> None:
    """The run's figures so far (`final`: after the last check), printed at the end and written to
    ``tests/.artifacts/crash/<deployment>-<seed>-figures.json``."""
    figures: dict[str, Any] = {
        "deployment": label,
        "seed": history.seed,
        "final": final,
        "kills": killer.kills,
        "whole_gateway_kills": sum(1 for k in history.kills if k["whole"]),
        "operations": len(history.operations),
        "settled_by_retry": sum(1 for op in history.operations if op.settle == "retried"),
        "settled_by_reading": sum(1 for op in history.operations if op.settle == "resolved"),
        "client_histories": CLIENTS,
        "checks": checker.figures.checks,
        "files_unsealed": checker.figures.files_unsealed,
        "audit_records_read": checker.figures.audit_records,
        "torn_audit_lines": checker.figures.torn_audit_lines,
        "purges_completed": checker.figures.purges_seen,
        "violations": len(violations),
        "seconds": round(time.monotonic() - started, 1),
    }
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    (ARTIFACTS / f"{label}-{history.seed}-figures.json").write_text(json.dumps(figures, indent=1))
    if final:
        print(json.dumps(figures))


def test_sqlite_gateway_killed_at_random_loses_nothing_acknowledged(tmp_path: Path) -> None:
    gateways = _gateways(tmp_path, 1, None)
    with _running(gateways):  # the checker opens the KEK the gateway created
        checker = Checker(
            gateways[0].data_dir,
            [tmp_path / "audit-0.jsonl"],
            sqlite_path=gateways[0].data_dir / "catalog.db",
        )
        try:
            _run("sqlite", gateways, checker)
        finally:
            checker.close()


def test_two_postgres_gateways_killed_at_random_lose_nothing_acknowledged(
    tmp_path: Path, postgres_server: PostgresServer, postgres_url: str
) -> None:
    gateways = _gateways(tmp_path, 2, postgres_url)
    database = postgres_url.rsplit("/", 1)[1]
    audit_logs = [tmp_path / f"audit-{i}.jsonl" for i in range(2)]
    with _running(gateways):
        checker = Checker(gateways[0].data_dir, audit_logs, postgres=postgres_server, database=database)
        try:
            _run("postgres", gateways, checker)
        finally:
            checker.close()


def test_the_checker_reports_each_kind_of_damage(tmp_path: Path) -> None:
    """The checks can fail: each kind of damage a crash could do, made by hand, is reported."""
    gateways = _gateways(tmp_path, 1, None)
    with _running(gateways):
        gateway = gateways[0]
        url = f"{gateway.url}/v1/namespaces"
        create = {
            "name": "t",
            "schema": {
                "type": "struct",
                "fields": [{"id": 1, "name": "id", "type": "long", "required": False}],
            },
        }
        commit = {"updates": [{"action": "set-properties", "updates": {"m-1": "1"}}]}
        answers = [
            requests.post(url, json={"namespace": ["c0n1"], "properties": {"m-0": "1"}}, timeout=30),
            requests.post(f"{url}/c0n1/tables", json=create, timeout=30),
            requests.post(
                f"{url}/c0n1/tables/t", json=commit, headers={"X-Request-ID": "ack-commit"}, timeout=30
            ),
        ]
        assert [a.status_code for a in answers] == [200, 200, 200], [a.text for a in answers]
        registry = gateway.data_dir / "catalog.db"
        checker = Checker(gateway.data_dir, [tmp_path / "audit-0.jsonl"], sqlite_path=registry)
        try:
            model = Model(namespaces={"c0n1": {"m-0"}}, tables={("c0n1", "t"): {"m-1"}})
            model.acknowledged.append("ack-commit")
            assert checker.check([model]) == []  # the control: an undamaged state passes

            def reported(changed: Model) -> str:
                return "\n".join(checker.check([changed]))

            assert "acknowledged changes lost: ['m-9']" in reported(
                Model(namespaces={"c0n1": {"m-0"}}, tables={("c0n1", "t"): {"m-1", "m-9"}})
            )
            assert "answered as failed are there: ['m-1']" in reported(
                Model(namespaces={"c0n1": {"m-0"}}, tables={("c0n1", "t"): set()}, forbidden={"m-1"})
            )
            assert "acknowledged, missing [('c0n1', 'u')]" in reported(
                Model(namespaces={"c0n1": {"m-0"}}, tables={("c0n1", "t"): {"m-1"}, ("c0n1", "u"): set()})
            )
            unaudited = Model(
                namespaces={"c0n1": {"m-0"}}, tables={("c0n1", "t"): {"m-1"}}, acknowledged=["lost"]
            )
            assert "without their audit record: ['lost']" in reported(unaudited)
            _check_torn_audit_lines(gateway.data_dir, tmp_path, registry, model)

            gateway.stop()  # the damage is done to files and rows at rest
            with sqlite3.connect(registry) as db:
                location = db.execute("SELECT metadata_location FROM catalog_objects").fetchone()[0]
                db.execute("DELETE FROM object_roots WHERE kind = 'table'")
            current = Path(urllib.parse.unquote(urllib.parse.urlparse(location).path))
            first = sorted(current.parent.glob("00000-*.metadata.json"))[0]
            first.unlink()
            assert "its metadata log names a missing file" in reported(model)
            assert "has no recorded roots" in reported(model)
            current.write_bytes(current.read_bytes()[:100])
            fresh = Checker(gateway.data_dir, [tmp_path / "audit-0.jsonl"], sqlite_path=registry)
            try:
                assert "the metadata file does not open" in "\n".join(fresh.check([model]))
            finally:
                fresh.close()
        finally:
            checker.close()


def _check_torn_audit_lines(data_dir: Path, tmp_path: Path, registry: Path, model: Model) -> None:
    """A killed process's fragment on a line of its own is tolerated (counted); an acknowledged
    record glued to one cannot be read, and is reported as unaudited."""
    records = (tmp_path / "audit-0.jsonl").read_bytes().splitlines(keepends=True)
    acknowledged = next(
        line
        for line in records
        if json.loads(line).get("request_id") == "ack-commit" and json.loads(line)["event"] == "mutation"
    )
    for name, content, unaudited in (
        ("alone", acknowledged[:50] + b"\n" + acknowledged, False),
        ("glued", acknowledged[:50] + acknowledged, True),
    ):
        log = tmp_path / f"audit-{name}.jsonl"
        log.write_bytes(content)
        checker = Checker(data_dir, [log], sqlite_path=registry)
        try:
            found = "\n".join(checker.check([model]))
            assert ("without their audit record: ['ack-commit']" in found) is unaudited, found
            assert checker.figures.torn_audit_lines == 1
        finally:
            checker.close()
