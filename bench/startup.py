"""Start-up of the everyday `cedarberg` commands and the gateway's memory at idle (issue 29, part 7).

    python -m bench.startup [--runs N | --quick] [--output DIR]

Measures, each as the median wall time of N runs (default 11, 3 with --quick) of a fresh child process
`python -m cedarberg.gateway.cli ...`, on this machine:

- `cedarberg --help`;
- `cedarberg keys list` on a key store of one key (a temporary data directory, SQLite);
- `cedarberg policies validate` on the bundled policies;

each against the target of 0.3 s (PASS/FAIL), and the resident memory (RSS of the process tree)
of a `cedarberg serve` with 1 worker once `/ready` answers 200 and it has been idle for a second.
Writes DIR/startup.json and DIR/startup.md (default bench/results, whose run also rewrites the
block between the `bench:startup` markers of docs/performance.md). `make bench` runs it after the
load scenarios (bench/suite.py: `--only cedarberg/cli/startup` runs it alone, `--quick` with 3 runs)
and its three targets join the suite's. Exit status 1 if a target is missed.
Which modules each command imports is tested (tests/gateway/test_cli_startup.py); this measures
what that costs.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

import bench  # noqa: F401  (puts the repo root on sys.path, turns the test fork server off)
from bench.model import Target
from bench.procstat import process_tree, rss_bytes
from tests.support.gateway import GatewayProcess

KEY = "cedarberg/cli/startup"  # what `python -m bench.suite --only REGEX` matches
TARGET_SECONDS = 0.3
RUNS, QUICK_RUNS = 11, 3
IDLE_SECONDS = 1.0
RESULTS_DIR = Path(__file__).resolve().parent / "results"
REPO_ROOT = Path(__file__).resolve().parent.parent
PERFORMANCE_PAGE = REPO_ROOT / "docs" / "performance.md"
PAGE_BEGIN, PAGE_END = "<!-- bench:startup:begin -->", "<!-- bench:startup:end -->"


@dataclass(frozen=True, slots=True)
class CommandTiming:
    """The wall times of one command's runs, in seconds."""

    command: str
    median_s: float
    min_s: float
    max_s: float
    runs: int
    cpu_median_s: float  # user + system CPU of the process: what the command costs, load or not


@dataclass(frozen=True, slots=True)
class StartupResult:
    timings: list[CommandTiming]
    idle_rss_mb: float
    workers: int
    load_average: tuple[
        float, float
    ]  # 1-minute load average before and after: others' work inflates wall times


def _environment(pycache: Path) -> dict[str, str]:
    """The children's environment: no `CEDARBERG_*` settings, this checkout's sources, and a
    bytecode cache of their own in `pycache`.

    An installed command starts from compiled bytecode (pip compiles at install, a checkout's
    first run writes `__pycache__`). A shell with PYTHONDONTWRITEBYTECODE set (the project's
    sandboxes set it) would compile every module of the command again in every run, about 0.05 s
    of each: the unmeasured first run of a command writes its bytecode under `pycache` instead,
    and the measured runs read it, without writing into the checkout."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("CEDARBERG_") and k != "PYTHONDONTWRITEBYTECODE"
    }
    env["PYTHONPYCACHEPREFIX"] = str(pycache)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO_ROOT / "src"), *filter(None, [env.get("PYTHONPATH")])])
    return env


def _time(argv: list[str], runs: int, cwd: Path, pycache: Path) -> CommandTiming:
    """Median wall time of `cedarberg ARGV` over `runs` runs (one unmeasured run first, which
    warms the page cache and writes the bytecode cache `pycache` the measured runs read)."""
    command = [sys.executable, "-m", "cedarberg.gateway.cli", *argv]
    env = _environment(pycache)
    times, cpu = [], []
    for run in range(runs + 1):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        began = time.perf_counter()
        done = subprocess.run(command, capture_output=True, env=env, cwd=cwd, timeout=120, check=False)  # noqa: S603
        elapsed = time.perf_counter() - began
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        if done.returncode != 0:
            raise RuntimeError(f"cedarberg {' '.join(argv)} failed: {done.stderr.decode()[-2000:]}")
        if run:
            times.append(elapsed)
            cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    label = " ".join(a for a in argv if not a.startswith("/")).replace("--data-dir", "").strip()
    return CommandTiming(
        label, statistics.median(times), min(times), max(times), runs, statistics.median(cpu)
    )


def _idle_rss_mb(work: Path) -> float:
    """RSS of a 1-worker `cedarberg serve` (process tree) after `/ready` and a second of idle."""
    gateway = GatewayProcess(work / "serve", log_path=work / "serve.log")
    gateway.start()
    try:
        with urllib.request.urlopen(f"{gateway.url}/ready", timeout=30) as answer:  # noqa: S310 (http://127.0.0.1)
            if answer.status != 200:
                raise RuntimeError(f"/ready answered {answer.status}")
        time.sleep(IDLE_SECONDS)
        assert gateway.pid is not None
        return rss_bytes(process_tree(gateway.pid)) / 2**20
    finally:
        gateway.stop()


def measure(runs: int) -> StartupResult:
    """Time the three commands and the idle gateway; raises RuntimeError if a command fails."""
    load_before = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="cedarberg-startup-") as tmp:
        work = Path(tmp)
        data_dir, pycache = work / "keys", work / "pycache"
        created = subprocess.run(  # noqa: S603
            [sys.executable, "-m", "cedarberg.gateway.cli", "keys", "create", "--service", "bench",
             "--group", "admins", "--data-dir", str(data_dir)],
            capture_output=True, env=_environment(pycache), cwd=work, timeout=120, check=False,
        )  # fmt: skip
        if created.returncode != 0:
            raise RuntimeError(f"cedarberg keys create failed: {created.stderr.decode()[-2000:]}")
        timings = [
            _time(["--help"], runs, work, pycache),
            _time(["keys", "list", "--data-dir", str(data_dir)], runs, work, pycache),
            _time(["policies", "validate"], runs, work, pycache),
        ]
        rss_mb = _idle_rss_mb(work)
        return StartupResult(timings, rss_mb, workers=1, load_average=(load_before, os.getloadavg()[0]))


def targets(result: StartupResult) -> list[Target]:
    """One target per command: median start-up at most 0.3 s."""
    return [
        Target(
            name=f"start-up of `cedarberg {timing.command}`",
            verdict="PASS" if timing.median_s <= TARGET_SECONDS else "FAIL",
            measured=f"{timing.median_s:.3f} s (median of {timing.runs}, "
            f"{timing.min_s:.3f}-{timing.max_s:.3f})",
            required=f"<= {TARGET_SECONDS} s",
            ratio=TARGET_SECONDS / timing.median_s,
        )
        for timing in result.timings
    ]


def markdown(result: StartupResult) -> str:
    lines = [
        "# Start-up and idle memory",
        "",
        "Written by `python -m bench.startup` (and `make bench`); see bench/startup.py.",
        "",
        "| command | median | min-max | CPU (median) | runs | target | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    for timing, target in zip(result.timings, targets(result), strict=True):
        lines.append(
            f"| `cedarberg {timing.command}` | {timing.median_s:.3f} s"
            f" | {timing.min_s:.3f}-{timing.max_s:.3f} s | {timing.cpu_median_s:.3f} s | {timing.runs}"
            f" | ≤ {TARGET_SECONDS} s | **{target.verdict}** |"
        )
    lines += [
        "",
        "Each command ran from compiled bytecode, as an installed command does (an unmeasured first"
        " run wrote it; `_environment` in bench/startup.py).",
        "",
        f"Resident memory of `cedarberg serve` ({result.workers} worker, process tree) after `/ready`"
        f" and {IDLE_SECONDS:g} s idle: **{result.idle_rss_mb:.1f} MB**.",
        "",
        f"Load average of the machine (1 min) before and after: {result.load_average[0]:.2f}, "
        f"{result.load_average[1]:.2f} on {os.cpu_count()} cores (work of others stretches wall times).",
        "",
    ]
    return "\n".join(lines)


def update_performance_page(page: Path, result: StartupResult) -> bool:
    """Replace the start-up block of `page` (docs/performance.md) with `result`'s table; False (and
    nothing written) if the page has no such block."""
    text = page.read_text()
    begin, end = text.find(PAGE_BEGIN), text.find(PAGE_END)
    if begin < 0 or end < begin:
        return False
    table = markdown(result).split("\n", 4)[4]  # without the title and the "written by" line
    when = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    block = f"{PAGE_BEGIN}\n\nWritten by `python -m bench.startup` on {when}:\n\n{table.strip()}\n\n"
    page.write_text(text[:begin] + block + text[end:])
    return True


def write(directory: Path, result: StartupResult, *, update_page: bool = False) -> None:
    """DIR/startup.json and DIR/startup.md; with `update_page`, also the start-up block of
    docs/performance.md (as the suite does for its targets when it writes bench/results)."""
    directory.mkdir(parents=True, exist_ok=True)
    document = {
        "target_seconds": TARGET_SECONDS,
        "timings": [asdict(t) for t in result.timings],
        "idle_rss_mb": round(result.idle_rss_mb, 1),
        "workers": result.workers,
        "load_average": list(result.load_average),
        "cpu_count": os.cpu_count(),
        "targets": [asdict(t) for t in targets(result)],
    }
    (directory / "startup.json").write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n")
    (directory / "startup.md").write_text(markdown(result))
    if update_page:
        update_performance_page(PERFORMANCE_PAGE, result)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.startup", description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=RUNS, help=f"measured runs per command (default {RUNS})")
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_RUNS} runs per command")
    parser.add_argument("--output", type=Path, default=RESULTS_DIR, help="results directory")
    args = parser.parse_args(argv)
    if args.runs < 1:
        parser.error("--runs must be >= 1")
    result = measure(QUICK_RUNS if args.quick else args.runs)
    write(args.output, result, update_page=args.output.resolve() == RESULTS_DIR)
    print(markdown(result))
    return 1 if any(t.verdict == "FAIL" for t in targets(result)) else 0


if __name__ == "__main__":
    sys.exit(main())
