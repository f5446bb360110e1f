"""The benchmark suite: Cedarberg (5 variants: SQLite or PostgreSQL registry, each with one worker
and with one worker per core, and TLS with one worker), the SeaweedFS peer on the same cores and a
bare aiohttp ceiling, measured in one run on this machine; writes
bench/results/results.{json,md,png} and exits 1 if a target is missed.

    python -m bench.suite [--quick] [--reps N] [--soak-seconds S] [--only REGEX] [--cores N]

``--only`` keeps the scenarios whose key ``system/variant/operation`` (e.g.
``cedarberg/http-1w/load_table``, ``seaweedfs/peer/commit_seq``, ``cedarberg/http-1w/soak``)
matches the regular expression.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import functools
import os
import re
import shlex
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import bench  # noqa: F401  (puts the repo root on sys.path, turns the test fork server off)
from bench import credential_forms, report, startup
from bench.cedarberg import POSTGRES, SQLITE, Variant, running_cedarberg
from bench.ceiling import running_ceiling
from bench.endpoint import Endpoint
from bench.http import HttpClient, bearer
from bench.machine import describe, filesystem_of, usable_cores
from bench.measure import Plan, Prepared, new_scenario, prepare, record, run_once, server_exit, soak
from bench.model import FAILED, UNSUPPORTED, Outcome, Run, Scenario, Soak
from bench.peer import running_seaweedfs, weed_version
from bench.processes import crash_excerpt
from bench.procstat import is_alive
from bench.restarts import Restarting
from bench.scenarios import (
    ALL,
    BY_NAME,
    CEILING,
    PER_CORE_SUBSET,
    POSTGRES_PER_CORE_SUBSET,
    POSTGRES_SUBSET,
    READ,
    TLS_SUBSET,
    Operation,
)
from bench.targets import FAIL, TIMES, evaluate
from bench.wrk import WrkError, wrk_version
from tests.support.secure import AMBIENT_CA_VARIABLES
from tests.support.tls import make_pki

MAIN_VARIANT = Variant(tls=False, workers=1, store=SQLITE, operations=ALL + credential_forms.NAMES)
PEER_OPERATIONS = ALL
SOAK_KEY = f"cedarberg/{MAIN_VARIANT.name}/soak"


def variants(cores: int) -> tuple[Variant, ...]:
    """The Cedarberg variants, in the order they run, for a run on ``cores`` cores.

    Each store runs at one worker (the single-process figures: every read and write on SQLite,
    where the read targets and the soak are) and at one worker per core (``serve --workers
    cores``, as a deployment on these cores runs, against the peer on the same cores: the write
    targets); TLS runs at one worker. On one core the two coincide and run once."""
    listed = (
        MAIN_VARIANT,
        Variant(tls=False, workers=cores, store=SQLITE, operations=PER_CORE_SUBSET),
        Variant(tls=True, workers=1, store=SQLITE, operations=TLS_SUBSET),
        Variant(tls=False, workers=1, store=POSTGRES, operations=POSTGRES_SUBSET),
        Variant(tls=False, workers=cores, store=POSTGRES, operations=POSTGRES_PER_CORE_SUBSET),
    )
    order = MAIN_VARIANT.operations  # every operation a variant may run, in the order they run
    merged: dict[str, Variant] = {}
    for variant in listed:
        names = set(variant.operations)
        if variant.name in merged:
            names |= set(merged[variant.name].operations)
        merged[variant.name] = dataclasses.replace(variant, operations=tuple(n for n in order if n in names))
    return tuple(merged.values())


def _arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m bench.suite",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--quick", action="store_true", help="smoke test: 1 repetition, 2 s runs, no soak")
    parser.add_argument("--reps", type=int, default=2, help="measured runs per scenario (default 2)")
    parser.add_argument("--duration", type=int, default=5, help="seconds per measured run (5; max 20)")
    parser.add_argument("--warmup", type=int, default=1, help="seconds of warm-up before each run (1)")
    parser.add_argument("--soak-seconds", type=int, default=60, help="soak length; 0 skips it (default 60)")
    parser.add_argument("--only", metavar="REGEX", help="run only scenarios whose key matches")
    parser.add_argument("--output", type=Path, default=report.RESULTS_DIR, help="results directory")
    parser.add_argument("--keep", action="store_true", help="keep the work directory (data, server logs)")
    parser.add_argument(
        "--cores",
        type=int,
        default=usable_cores(),
        help="the cores the run may use: the workers of the one-worker-per-core variants and the "
        "peer's GOMAXPROCS (default: the CPUs this process may run on, %(default)s here)",
    )
    args = parser.parse_args(argv)
    if args.quick:
        args.reps, args.duration, args.soak_seconds = 1, 2, 0
    if not 1 <= args.duration <= 20:
        parser.error("--duration must be 1..20 seconds")
    if args.reps < 1 or args.warmup < 0 or args.soak_seconds < 0:
        parser.error("--reps must be >= 1, --warmup and --soak-seconds >= 0")
    if args.cores < 1:
        parser.error("--cores must be >= 1")
    return args


class Suite:
    def __init__(self, args: argparse.Namespace, work_dir: Path) -> None:
        self.args = args
        self.work_dir = work_dir
        self.plan = Plan(reps=args.reps, duration_s=args.duration, warmup_s=args.warmup)
        self.pattern = re.compile(args.only) if args.only else None
        self.scenarios: list[Scenario] = []
        self.soak: Soak | None = None
        self.versions: dict[str, str] = {}
        self.durability: dict[str, dict[str, str]] = {}  # per Cedarberg variant
        self.server_died = False  # then the work directory (with the server logs) is kept

    def selected(self, key: str) -> bool:
        return self.pattern is None or bool(self.pattern.search(key))

    def chosen(self, label: str, names: tuple[str, ...]) -> list[Operation]:
        return [op for op in credential_forms.operations_for(names) if self.selected(f"{label}/{op.name}")]

    # -- the servers -------------------------------------------------------------------------

    def run(self) -> None:
        pki = make_pki(self.work_dir / "pki")
        ceiling_ops = self.chosen("ceiling/bare-aiohttp", CEILING)
        ceiling_body: bytes | None = None
        ceiling_tokens: dict[str, str] = {}
        for variant in variants(self.args.cores):
            label = f"cedarberg/{variant.name}"
            operations = self.chosen(label, variant.operations)
            main = variant == MAIN_VARIANT
            want_soak = main and self.args.soak_seconds > 0 and self.selected(SOAK_KEY)
            want_body = main and bool(ceiling_ops)
            if not (operations or want_soak or want_body):
                continue
            directory = self.work_dir / variant.name
            start = functools.partial(
                running_cedarberg, directory, variant, tls_pki=pki if variant.tls else None
            )
            with self._started(label, start, operations) as endpoint:
                if endpoint is None:
                    continue
                self.versions.setdefault("gateway_event_loop", endpoint.event_loop)
                self.durability[variant.name] = {
                    **endpoint.durability,
                    "file system": filesystem_of(directory),
                }
                if want_body:
                    ceiling_body = _load_table_body(endpoint)
                    # The ceiling gets byte-identical requests (it ignores the header).
                    ceiling_tokens = dict(endpoint.tokens)
                self.measure(endpoint, operations)
                if want_soak:
                    self.run_soak(endpoint)
        if ceiling_ops:
            if ceiling_body is None:
                self._record_failure(
                    "ceiling/bare-aiohttp", ceiling_ops, "no loadTable body from the gateway"
                )
            else:
                start_ceiling = functools.partial(running_ceiling, ceiling_body, self.work_dir / "ceiling")
                with self._started("ceiling/bare-aiohttp", start_ceiling, ceiling_ops) as endpoint:
                    if endpoint is not None:
                        self.versions["ceiling_event_loop"] = endpoint.event_loop
                        endpoint.tokens = ceiling_tokens
                        self.measure(endpoint, ceiling_ops)
        peer_ops = self.chosen("seaweedfs/peer", PEER_OPERATIONS)
        if peer_ops:
            # After a crash the peer starts again in a fresh data directory; each is kept.
            peer = Restarting(
                lambda n: running_seaweedfs(
                    self.work_dir / ("seaweedfs" if n == 0 else f"seaweedfs-{n + 1}"), self.args.cores
                )
            )
            with self._started("seaweedfs/peer", lambda: peer, peer_ops) as endpoint:
                if endpoint is not None:
                    self.measure(endpoint, peer_ops, peer)

    @contextlib.contextmanager
    def _started(
        self, label: str, start: Callable[[], AbstractContextManager[Endpoint]], operations: list[Operation]
    ) -> Iterator[Endpoint | None]:
        """Enter ``start()``; if the server cannot start, record its scenarios as failed
        (unsupported for the peer) and yield None instead of raising."""
        print(f"\n== {label}: starting", flush=True)
        begun = time.monotonic()
        with contextlib.ExitStack() as stack:
            try:
                endpoint = stack.enter_context(start())
            except Exception as err:  # a server that cannot start is a result, not a crash
                print(f"== {label}: could not start: {err}", flush=True)
                self._record_failure(label, operations, f"server did not start: {err}")
                yield None
                return
            print(f"== {label}: ready in {time.monotonic() - begun:.1f}s at {endpoint.base_url}", flush=True)
            yield endpoint
        print(f"== {label}: stopped", flush=True)

    def _record_failure(self, label: str, operations: list[Operation], error: str) -> None:
        system, variant = label.split("/")
        for operation in operations:
            scenario = Scenario(
                system, variant, operation.name, operation.title, 0, False, operation.connections
            )
            scenario.status = UNSUPPORTED if system == "seaweedfs" else FAILED
            scenario.error = error
            self.scenarios.append(scenario)

    # -- the measurements --------------------------------------------------------------------

    def measure(
        self, endpoint: Endpoint, operations: list[Operation], peer: Restarting | None = None
    ) -> None:
        """Preflight every operation, then run all reads (every repetition) before the writes.

        With ``peer``, a run that crashes the server is repeated on a fresh one (``_run``), the
        following scenarios run there, and the crash is recorded in the scenario."""
        prepared: dict[str, Prepared] = {}
        scenarios: list[tuple[Scenario, Operation]] = []
        for operation in operations:
            scenario = new_scenario(endpoint, operation)
            self.scenarios.append(scenario)
            ready = prepare(endpoint, operation, scenario)
            if ready is None:
                print(f"   {scenario.key}: {scenario.status}: {scenario.error}", flush=True)
            else:
                prepared[operation.name] = ready
                scenarios.append((scenario, operation))
        # All reads first: the writes add namespaces and tables that some listings would show.
        for kind_is_read in (True, False):
            for rep in range(self.plan.reps):
                for scenario, operation in scenarios:
                    if (operation.kind == READ) != kind_is_read:
                        continue
                    if peer is not None:
                        if scenario.crashes and scenario.status == UNSUPPORTED:
                            continue  # it crashed the peer twice in a row: spare the others
                        if not peer.running:
                            scenario.status, scenario.error = UNSUPPORTED, "the peer did not restart"
                            continue
                        endpoint = peer.endpoint
                    if not is_alive(endpoint.pid):
                        self.server_died = True
                        scenario.status = UNSUPPORTED if endpoint.system == "seaweedfs" else FAILED
                        scenario.error = scenario.error or server_exit(endpoint).removeprefix("; ")
                        continue
                    if operation.name not in prepared:  # the peer was restarted: preflight again
                        ready = prepare(endpoint, operation, scenario)
                        if ready is None:
                            continue
                        prepared[operation.name] = ready
                    self._run(endpoint, prepared, scenario, peer)
                    _print_run(scenario, rep)

    def _run(
        self, endpoint: Endpoint, prepared: dict[str, Prepared], scenario: Scenario, peer: Restarting | None
    ) -> None:
        """One measured run of ``scenario``. If it crashed the peer, the peer starts again (fresh
        data, fixtures, preflights). A run whose responses all came before the crash counts (its
        CPU and RSS may be short); otherwise it is repeated once on the new peer, without the
        warm-up, whose end (wrk dropping the requests in flight) is what crashes it."""
        plan = self.plan
        for attempt in (1, 2):
            outcome: Run | WrkError
            try:
                outcome = run_once(endpoint, prepared[scenario.operation], plan)
            except WrkError as err:
                outcome = err
            # A server torn down by a crash shows no memory before it shows as exited.
            if is_alive(endpoint.pid) and not (isinstance(outcome, Run) and outcome.rss_mb == 0):
                record(endpoint, scenario, outcome)
                return
            self.server_died = True
            if peer is None or not peer.can_restart():
                record(endpoint, scenario, outcome)
                return
            clean = isinstance(outcome, Run) and not outcome.problems
            assert endpoint.log_path is not None
            scenario.crashes.append(
                f"run {len(scenario.runs) + 1}, attempt {attempt}, "
                f"{'after the measured run (counted)' if clean else 'before the measured run ended'}: "
                f"{crash_excerpt(endpoint.log_path)} (log: {endpoint.log_path})"
            )
            print(f"   {scenario.key}: the peer crashed ({scenario.crashes[-1]}); restarting it", flush=True)
            prepared.clear()
            try:
                endpoint = peer.restart()
            except Exception as err:  # a peer that cannot start again is a result, not a crash
                scenario.status, scenario.error = UNSUPPORTED, f"the peer did not restart: {err}"
                return
            if clean:
                assert isinstance(outcome, Run)
                record(endpoint, scenario, outcome)
                return
            ready = prepare(endpoint, BY_NAME[scenario.operation], scenario)
            if ready is None:
                return
            prepared[scenario.operation] = ready
            plan = dataclasses.replace(self.plan, warmup_s=0)
        scenario.status = UNSUPPORTED
        scenario.error = f"the peer crashed in both attempts of a run: {scenario.crashes[-1]}"

    def run_soak(self, endpoint: Endpoint) -> None:
        operation = BY_NAME["load_table"]
        scenario = new_scenario(endpoint, operation)
        ready = prepare(endpoint, operation, scenario)
        if ready is None:
            self.soak = Soak(self.args.soak_seconds, [], 0.0, 0.0, 0, 0.0, [scenario.error])
            return
        print(f"   {SOAK_KEY}: {self.args.soak_seconds}s of loadTable at 32 connections", flush=True)
        self.soak = soak(endpoint, ready, self.args.soak_seconds)
        print(
            f"   {SOAK_KEY}: RSS {self.soak.baseline_mb:.1f} MB after 10 s -> {self.soak.final_mb:.1f} MB "
            f"({self.soak.drift:+.1%}), {self.soak.rps:,.0f} req/s {'; '.join(self.soak.problems)}",
            flush=True,
        )


def _load_table_body(endpoint: Endpoint) -> bytes:
    operation = BY_NAME["load_table"]
    reply = HttpClient(endpoint.cafile).get(
        endpoint.base_url + endpoint.expand(operation.path), bearer(endpoint.tokens[operation.role])
    )
    if reply.status != 200:
        raise RuntimeError(f"loadTable for the ceiling's body failed: {reply.status} {reply.text()}")
    return reply.body


def _print_run(scenario: Scenario, rep: int) -> None:
    if not scenario.runs or len(scenario.runs) <= rep:
        print(f"   {scenario.key} #{rep + 1}: {scenario.status}: {scenario.error}", flush=True)
        return
    run = scenario.runs[-1]
    extra = f"  PROBLEM: {'; '.join(run.problems)}" if run.problems else ""
    print(
        f"   {scenario.key:<44} #{rep + 1} {run.rps:>9,.0f} req/s"
        f"  p50 {run.p50_ms:7.2f}  p99 {run.p99_ms:7.2f}"
        f"  p99.9 {run.p999_ms:7.2f} ms  cpu {run.cpu_us_per_request:7,.0f} µs/req  rss {run.rss_mb:5.0f} MB"
        f"  bg {run.background_cores:4.2f} cores  {run.statuses or ''}{extra}",
        flush=True,
    )


def main(argv: list[str] | None = None) -> int:
    args = _arguments(argv)
    for variable in list(os.environ):
        # requests (pyiceberg) would trust these CA bundles over our CA; CEDARBERG_* variables
        # would configure `cedarberg keys create` (GatewayProcess drops them for the server).
        if variable in AMBIENT_CA_VARIABLES or variable.startswith("CEDARBERG_"):
            del os.environ[variable]
    # `kill <pid>` unwinds like Ctrl-C: the servers and the PostgreSQL cluster are stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    began = time.monotonic()
    work_dir = Path(tempfile.mkdtemp(prefix="cedarberg-bench-"))
    # mkdtemp's 0700 would keep out the postgres user, as whom PostgreSQL runs when the suite
    # runs as root (bench/postgres.py); others may pass through, not list.
    work_dir.chmod(0o711)
    suite = Suite(args, work_dir)
    try:
        suite.run()
    finally:
        if args.keep or suite.server_died:
            print(f"work directory kept (server data and logs): {work_dir}")
        else:
            shutil.rmtree(work_dir, ignore_errors=True)
    versions = {"wrk": wrk_version(), "weed": weed_version(), **suite.versions}
    machine = describe(versions)
    targets = evaluate(suite.scenarios, suite.soak, args.cores)
    if suite.selected(startup.KEY):  # after the load runs, on a quiet machine
        print(f"\n== {startup.KEY}", flush=True)
        started = startup.measure(startup.QUICK_RUNS if args.quick else startup.RUNS)
        startup.write(args.output, started, update_page=args.output.resolve() == report.RESULTS_DIR)
        print(startup.markdown(started), flush=True)
        targets += startup.targets(started)
    wall = time.monotonic() - began
    settings: dict[str, Any] = {
        "argv": shlex.join(sys.argv[1:] if argv is None else argv),
        "reps": args.reps,
        "duration_s": args.duration,
        "warmup_s": args.warmup,
        "soak_seconds": args.soak_seconds,
        "only": args.only,
        "cores": args.cores,
        "wall_seconds": round(wall),
    }
    report.write_all(
        args.output, machine, settings, Outcome(suite.scenarios, suite.soak, targets, suite.durability)
    )
    if args.output.resolve() == report.RESULTS_DIR and report.update_performance_page(
        report.PERFORMANCE_PAGE, machine, settings, targets
    ):
        print(f"targets table of {report.PERFORMANCE_PAGE} updated")
    print("\n== targets")
    for target in targets:
        margin = "" if target.ratio is None else f"  margin {TIMES}{target.ratio:.2f}"
        detail = f"  ({target.detail})" if target.detail else ""
        variant = f" [{target.variant}]" if target.variant else ""
        print(
            f"{target.verdict}  {target.name}{variant}: {target.measured} (required {target.required})"
            f"{margin}{detail}"
        )
    print(f"\nresults in {args.output} (wall time {wall / 60:.1f} min)")
    return 1 if any(target.verdict == FAIL for target in targets) else 0


if __name__ == "__main__":
    sys.exit(main())
