"""Measure one operation against one running server: a preflight request that must succeed,
then per repetition a warm-up run and a measured wrk run with the server's CPU and memory."""

from __future__ import annotations

import resource
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from bench.credential_forms import credential_header
from bench.endpoint import Endpoint
from bench.http import HttpClient
from bench.model import FAILED, UNSUPPORTED, Run, Scenario, Soak
from bench.processes import log_tail
from bench.procstat import ServerMeter, is_alive, machine_busy_seconds
from bench.scenarios import READ, TOKEN_FORM, Operation, token_form
from bench.wrk import READ_SCRIPT, WRITE_SCRIPT, Load, WrkError, WrkResult, run_wrk

# A read's responses must all look like the preflight's: body plus at most this much header.
HEADER_ALLOWANCE_BYTES = 2048
SOAK_BASELINE_SECONDS = 10


@dataclass(frozen=True)
class Plan:
    reps: int
    duration_s: int
    warmup_s: int


@dataclass(frozen=True)
class Prepared:
    """An operation made concrete for an endpoint, after its preflight succeeded."""

    operation: Operation
    script: Path
    args: list[str]
    body_bytes: int  # length of the preflight's response body (reads)


class PreflightError(Exception):
    pass


def new_scenario(endpoint: Endpoint, operation: Operation) -> Scenario:
    return Scenario(
        system=endpoint.system,
        variant=endpoint.variant,
        operation=operation.name,
        title=operation.title,
        workers=endpoint.workers,
        tls=endpoint.tls,
        connections=operation.connections,
    )


def prepare(endpoint: Endpoint, operation: Operation, scenario: Scenario) -> Prepared | None:
    """Run the preflight; on failure record it in ``scenario`` (unsupported for the peer) and
    return None."""
    try:
        return _prepare(endpoint, operation)
    except (PreflightError, OSError) as err:
        scenario.status = UNSUPPORTED if endpoint.system == "seaweedfs" else FAILED
        scenario.error = f"preflight: {err}"
        return None


def _headers(endpoint: Endpoint, operation: Operation) -> dict[str, str]:
    headers: dict[str, str] = {}
    if operation.role:
        headers.update(credential_header(operation.header, endpoint.tokens[operation.role]))
    if operation.method != "GET":
        headers["Content-Type"] = (
            "application/x-www-form-urlencoded" if operation.form else "application/json"
        )
    return headers


def _prepare(endpoint: Endpoint, operation: Operation) -> Prepared:
    client = HttpClient(endpoint.cafile)
    path = endpoint.expand(operation.path)
    body = operation.body.replace(TOKEN_FORM, token_form(endpoint.client_id, endpoint.client_secret))
    headers = _headers(endpoint, operation)
    if operation.conditional:
        first = client.get(endpoint.base_url + path, headers)
        etag = first.headers.get("ETag") or first.headers.get("Etag")
        if first.status != 200 or not etag:
            raise PreflightError(
                f"no ETag on loadTable (status {first.status}, headers {sorted(first.headers)})"
            )
        headers["If-None-Match"] = etag
    nonce = "p" + secrets.token_hex(4)
    concrete_path = path.replace("{t}", "0").replace("{n}", nonce)
    concrete_body = body.replace("{t}", "0").replace("{n}", nonce).encode() if body else None
    reply = client.request(operation.method, endpoint.base_url + concrete_path, concrete_body, headers)
    if reply.status != operation.success:
        raise PreflightError(f"{operation.method} {concrete_path} -> {reply.status} {reply.text()}")
    header_lines = [f"{name}: {value}" for name, value in headers.items()]
    if operation.kind == READ:
        return Prepared(operation, READ_SCRIPT, [path, *header_lines], len(reply.body))
    return Prepared(operation, WRITE_SCRIPT, [operation.method, path, body, "NONCE", *header_lines], 0)


def wrk_run(endpoint: Endpoint, prepared: Prepared, duration_s: int) -> WrkResult:
    """One wrk run of `prepared` against `endpoint` (a write gets a fresh nonce: unique names)."""
    args = list(prepared.args)
    if prepared.script == WRITE_SCRIPT:
        args[3] = "r" + secrets.token_hex(4)  # the run's nonce, part of every unique name
    operation = prepared.operation
    load = Load(threads=operation.threads, connections=operation.connections, duration_s=duration_s)
    return run_wrk(endpoint.base_url, prepared.script, args, load)


def run_once(endpoint: Endpoint, prepared: Prepared, plan: Plan) -> Run:
    """Warm up, then one measured run (its ``problems`` say what was unexpected).

    Raises WrkError if wrk itself failed."""
    meter = ServerMeter(endpoint.pid)
    if plan.warmup_s > 0:
        wrk_run(endpoint, prepared, plan.warmup_s)
    before = meter.snapshot()
    machine_before, client_before = machine_busy_seconds(), _children_cpu()
    result = wrk_run(endpoint, prepared, plan.duration_s)
    cpu = meter.cpu_since(before)
    client = _children_cpu() - client_before
    background = machine_busy_seconds() - machine_before - cpu - client
    run = _run(prepared, result, cpu, meter.rss())
    if result.requests:
        run.client_cpu_us_per_request = client / result.requests * 1e6
    run.background_cores = max(0.0, background / result.duration_s) if result.duration_s else 0.0
    return run


def record(endpoint: Endpoint, scenario: Scenario, outcome: Run | WrkError) -> None:
    """Add a run's outcome to ``scenario``: a run with problems, or wrk's failure, marks it
    failed (unsupported for the peer), with the end of the server's log if it has exited."""
    if isinstance(outcome, WrkError):
        scenario.status = UNSUPPORTED if endpoint.system == "seaweedfs" else FAILED
        scenario.error = str(outcome).strip() + server_exit(endpoint)
        return
    if outcome.problems:
        scenario.status = FAILED
        scenario.error = "; ".join(outcome.problems) + server_exit(endpoint)
    scenario.runs.append(outcome)


def _children_cpu() -> float:
    """CPU seconds of this process's finished children (wrk, once waited for)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def server_exit(endpoint: Endpoint) -> str:
    """If the server has exited: that, with the end of its log (else empty)."""
    if is_alive(endpoint.pid):
        return ""
    tail = log_tail(endpoint.log_path, 600) if endpoint.log_path else ""
    return f"; the server (pid {endpoint.pid}) has exited; its log ends: {tail}"


def _run(prepared: Prepared, result: WrkResult, cpu_s: float, rss: int) -> Run:
    operation = prepared.operation
    problems: list[str] = []
    if result.requests == 0:
        problems.append("no response completed")
    if result.socket_error_count:
        problems.append(f"socket errors {result.socket_errors}")
    per_response = result.bytes / result.requests if result.requests else 0.0
    if result.statuses is None:  # a read: wrk counted statuses above 399 only
        statuses = {"error(>399)": result.error_statuses} if result.error_statuses else {}
        ok = result.requests - result.error_statuses
        if result.error_statuses:
            problems.append(f"{result.error_statuses} responses with a status above 399")
        low, high = prepared.body_bytes, prepared.body_bytes + HEADER_ALLOWANCE_BYTES
        if result.requests and not low <= per_response <= high:
            problems.append(
                f"{per_response:.0f} bytes per response, the preflight's body has {prepared.body_bytes}: "
                "responses of another kind were mixed in"
            )
    else:
        statuses = {str(code): count for code, count in sorted(result.statuses.items())}
        ok = sum(count for code, count in result.statuses.items() if 200 <= code < 300)
        unexpected = {code: n for code, n in result.statuses.items() if code not in operation.expected}
        if unexpected:
            problems.append(f"unexpected statuses {unexpected}")
    latency = result.latency_us
    return Run(
        duration_s=result.duration_s,
        requests=result.requests,
        ok=ok,
        rps=ok / result.duration_s if result.duration_s else 0.0,
        p50_ms=latency["p50"] / 1000,
        p99_ms=latency["p99"] / 1000,
        p999_ms=latency["p999"] / 1000,
        mean_ms=latency["mean"] / 1000,
        max_ms=latency["max"] / 1000,
        cpu_us_per_request=cpu_s / result.requests * 1e6 if result.requests else 0.0,
        rss_mb=rss / 2**20,
        client_cpu_us_per_request=0.0,
        background_cores=0.0,
        bytes_per_response=per_response,
        statuses=statuses,
        socket_errors=result.socket_errors,
        problems=problems,
    )


def soak(endpoint: Endpoint, prepared: Prepared, seconds: int) -> Soak:
    """One long wrk run; the server tree's RSS is sampled every second meanwhile."""
    meter = ServerMeter(endpoint.pid)
    outcome: list[WrkResult | WrkError] = []

    def load() -> None:
        try:
            outcome.append(wrk_run(endpoint, prepared, seconds))
        except WrkError as err:
            outcome.append(err)

    thread = threading.Thread(target=load, name="soak-wrk", daemon=True)
    started = time.monotonic()
    thread.start()
    samples: list[float] = []
    deadline = started + seconds + 60
    while thread.is_alive() and time.monotonic() < deadline:
        samples.append(meter.rss() / 2**20)
        thread.join(timeout=max(0.0, started + len(samples) - time.monotonic()))
    thread.join(timeout=max(0.0, deadline - time.monotonic()))
    final = meter.rss() / 2**20
    problems: list[str] = []
    result = outcome[0] if outcome else WrkError("the soak run did not finish")
    if isinstance(result, WrkError):
        return Soak(seconds, samples, 0.0, final, 0, 0.0, [str(result)])
    run = _run(prepared, result, 0.0, 0)
    problems.extend(run.problems)
    baseline = samples[min(SOAK_BASELINE_SECONDS, len(samples) - 1)] if samples else 0.0
    return Soak(seconds, samples, baseline, final, result.requests, run.rps, problems)
