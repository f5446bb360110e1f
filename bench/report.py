"""Write a run's results: results.json (everything), results.md (tables), results.png (chart)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from bench.cedarberg import POSTGRES, SQLITE
from bench.model import OK, Outcome, Scenario, Target
from bench.scenarios import BY_NAME, WRITES
from bench.targets import gateway_at

RESULTS_DIR = Path(__file__).resolve().parent / "results"
# docs/performance.md shows the targets of the committed results between these markers; a run that
# writes bench/results rewrites that block.
PERFORMANCE_PAGE = Path(__file__).resolve().parent.parent / "docs" / "performance.md"
TARGETS_BEGIN, TARGETS_END = "<!-- bench:targets:begin -->", "<!-- bench:targets:end -->"
BACKGROUND_NOTE_CORES = 0.25  # CPU used by neither server nor wrk during a run, worth a note
DASH, TIMES = "\u2013", "\u00d7"  # written as escapes: ruff flags the characters themselves


def write_all(directory: Path, machine: dict[str, Any], settings: dict[str, Any], outcome: Outcome) -> None:
    """results.json, results.png and results.md of a suite run, in `directory`."""
    scenarios, soak, targets = outcome.scenarios, outcome.soak, outcome.targets
    directory.mkdir(parents=True, exist_ok=True)
    document = {
        "machine": machine,
        "settings": settings,
        "scenarios": [_scenario_json(s) for s in scenarios],
        "soak": dataclasses.asdict(soak) if soak else None,
        "targets": [dataclasses.asdict(t) for t in targets],
        "durability": outcome.durability,
    }
    (directory / "results.json").write_text(json.dumps(document, indent=2, ensure_ascii=False) + "\n")
    from bench.plot import plot

    plot(directory / "results.png", scenarios, soak)
    (directory / "results.md").write_text(markdown(machine, settings, outcome))


def _scenario_json(scenario: Scenario) -> dict[str, Any]:
    document = dataclasses.asdict(scenario)
    if scenario.runs:
        document["summary"] = {
            attribute: dataclasses.asdict(scenario.spread(attribute))
            for attribute in ("rps", "p50_ms", "p99_ms", "p999_ms", "cpu_us_per_request", "rss_mb")
        }
    return document


def _notes(scenario: Scenario) -> str:
    notes = []
    if scenario.status != OK:
        notes.append(f"**{scenario.status}**: {scenario.error}")
    if scenario.crashes:
        notes.append(
            f"**the server crashed {len(scenario.crashes)}{TIMES}** and was restarted: {scenario.crashes[0]}"
        )
    if scenario.runs:
        statuses: dict[str, int] = {}
        for run in scenario.runs:
            for code, count in run.statuses.items():
                statuses[code] = statuses.get(code, 0) + count
        shown = {code: n for code, n in statuses.items() if code not in ("200", "201")}
        if shown:
            notes.append(", ".join(f"{code}: {n}" for code, n in shown.items()))
        background = max(run.background_cores for run in scenario.runs)
        if background > BACKGROUND_NOTE_CORES:
            notes.append(f"other load on the machine: up to {background:.2f} cores")
    return "; ".join(notes).replace("|", "\\|").replace("\n", " ")[:400]


def _row(scenario: Scenario) -> str:
    cells = [
        scenario.title,
        scenario.system,
        scenario.variant,
        str(scenario.workers),
        str(scenario.connections),
    ]
    if scenario.runs:
        rps = scenario.spread("rps")
        cells += [
            f"{rps.median:,.0f}",
            f"{rps.low:,.0f}{DASH}{rps.high:,.0f}",
            f"{scenario.median('p50_ms'):.2f}",
            f"{scenario.median('p99_ms'):.2f}",
            f"{scenario.median('p999_ms'):.2f}",
            f"{scenario.median('cpu_us_per_request'):,.0f}",
            f"{scenario.median('rss_mb'):.0f}",
        ]
    else:
        cells += [DASH] * 7
    cells.append(_notes(scenario))
    return "| " + " | ".join(cells) + " |"


def targets_table(targets: list[Target]) -> list[str]:
    """The targets as a Markdown table (results.md; docs/performance.md copies it)."""
    lines = [
        "| Target | Variant (workers, store) | Required | Measured | Verdict | Margin | Detail |",
        "|---|---|---|---|---|---|---|",
    ]
    for target in targets:
        margin = DASH if target.ratio is None else f"{TIMES}{target.ratio:.2f} ({(target.ratio - 1):+.0%})"
        detail = target.detail.replace("|", "\\|").replace("\n", " ").replace("\t", " ")[:300]
        cells = [
            target.name,
            target.variant or target.store or DASH,
            target.required,
            target.measured,
            f"**{target.verdict}**",
            margin,
            detail,
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def writes_table(scenarios: list[Scenario], cores: int) -> list[str]:
    """The writes side by side: the peer on ``cores`` cores, and each store at one worker and at
    one worker per core, with each figure's ratio to the peer's (empty if nothing was written)."""
    by_key = {scenario.key: scenario for scenario in scenarios}
    columns = [("peer", f"SeaweedFS ({cores} cores)", "seaweedfs/peer")]
    for store in (SQLITE, POSTGRES):
        for workers in dict.fromkeys((1, cores)):
            system, variant = gateway_at(workers, store)
            plural = "" if workers == 1 else "s"
            columns.append((variant, f"{store}, {workers} worker{plural}", f"{system}/{variant}"))
    rows = []
    for operation in WRITES:
        measured = {name: by_key.get(f"{where}/{operation}") for name, _, where in columns}
        if not any(scenario is not None and scenario.usable for scenario in measured.values()):
            continue
        peer = measured["peer"]
        reference = peer.median("rps") if peer is not None and peer.usable else 0.0
        cells = [BY_NAME[operation].title]
        for name, _, _ in columns:
            scenario = measured[name]
            if scenario is None or not scenario.usable:
                cells.append(DASH)
                continue
            rps = scenario.median("rps")
            ratio = f" ({TIMES}{rps / reference:.2f})" if reference and name != "peer" else ""
            cells.append(f"{rps:,.0f}{ratio}")
        rows.append("| " + " | ".join(cells) + " |")
    if not rows:
        return []
    return [
        "## Writes as deployed",
        "",
        f"Successful writes per second (medians); in brackets, the ratio to the peer, which runs on the "
        f"same {cores} cores (GOMAXPROCS={cores}). One worker per core ({cores}) is how a deployment on "
        "these cores runs the gateway, and what the write targets compare; one worker is the "
        "single-process figure.",
        "",
        "| Operation | " + " | ".join(title for _, title, _ in columns) + " |",
        "|---" * (len(columns) + 1) + "|",
        *rows,
        "",
    ]


def _durability(durability: dict[str, dict[str, str]]) -> list[str]:
    if not durability:
        return []
    lines = [
        "## Durability",
        "",
        "Every Cedarberg variant measured commits acknowledged only once durable (the gateway has no "
        "setting that turns this off; docs/operations.md, Durability):",
        "",
    ]
    for variant, settings in durability.items():
        described = "; ".join(f"{name}: {value}" for name, value in settings.items())
        lines.append(f"- `{variant}`: {described}")
    return [*lines, ""]


def markdown(machine: dict[str, Any], settings: dict[str, Any], outcome: Outcome) -> str:
    scenarios, soak, targets = outcome.scenarios, outcome.soak, outcome.targets
    command = " ".join(["python -m bench.suite", settings["argv"]]).strip()
    passed = sum(t.verdict == "PASS" for t in targets)
    failed = sum(t.verdict == "FAIL" for t in targets)
    lines = [
        "# Cedarberg benchmark results",
        "",
        f"Measured {machine['date']} by `make bench` (`{command}`, {settings['wall_seconds'] / 60:.0f} min); "
        f"targets: {passed} PASS, {failed} FAIL, {len(targets) - passed - failed} SKIP.",
        "",
        "## Machine",
        "",
        f"- CPU: {machine['nproc']} {TIMES} {machine['cpu_model']}; RAM {machine['memory_gib']} GiB; "
        f"Linux {machine['kernel']}",
        f"- Python {machine['python']}, aiohttp {machine['aiohttp']}, uvloop {machine['uvloop']}",
        f"- Event loop: Cedarberg {machine.get('gateway_event_loop', '?')}, "
        f"ceiling {machine.get('ceiling_event_loop', '?')}",
        f"- Load generator: {machine.get('wrk', '?')}; peer: SeaweedFS `weed` {machine.get('weed', '?')}",
        f"- Cores the run used: {settings.get('cores', '?')} (the one-worker-per-core variants ran "
        f"that many workers, the peer that GOMAXPROCS)",
        f"- Runs: {settings['reps']} {TIMES} {settings['duration_s']} s per scenario after a "
        f"{settings['warmup_s']} s warm-up; medians, spread = min-max over the runs",
        "",
        "Server, load generator and peer share the machine's cores: a 2-worker gateway competes with "
        "wrk for the CPU.",
        "",
        "## Targets",
        "",
        *targets_table(targets),
    ]
    lines += [
        "",
        "Margin: measured ÷ bound for “at least” targets, bound ÷ measured for “at most” ones; "
        f"≥ {TIMES}1 passes.",
        "",
        *writes_table(scenarios, int(settings.get("cores", 1))),
        *_durability(outcome.durability),
        "## All scenarios",
        "",
        "req/s counts successful responses (2xx; 304 for the conditional loadTable): for 8 writers "
        "on one table, successful commits/s (409 CommitFailedException responses are listed in the "
        "notes). CPU µs/req: user+system CPU of the server's whole process tree (supervisor and "
        "workers) over the run ÷ completed responses. RSS: resident memory of that tree at the end. "
        "The notes name statuses other than 200/201 and CPU used by neither server nor wrk during a run "
        "(other processes on the machine: a disturbed measurement).",
        "",
        "| Scenario | System | Variant | Workers | Conns | req/s | spread | p50 ms | p99 ms | p99.9 ms "
        "| CPU µs/req | RSS MB | Notes |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
        *(_row(scenario) for scenario in scenarios),
        "",
    ]
    if soak is not None:
        lines += [
            "## Soak",
            "",
            f"loadTable at 32 connections for {soak.seconds} s on cedarberg/http-1w: "
            f"{soak.rps:,.0f} req/s; RSS after 10 s {soak.baseline_mb:.1f} MB, at the end "
            f"{soak.final_mb:.1f} MB ({soak.drift:+.1%}).",
            "",
        ]
    lines += ["## Chart", "", "![throughput and CPU per request](results.png)", ""]
    return "\n".join(lines)


def update_performance_page(
    page: Path, machine: dict[str, Any], settings: dict[str, Any], targets: list[Target]
) -> bool:
    """Replace the targets block of ``page`` (docs/performance.md) with this run's table; False
    (and nothing written) if the page has no such block."""
    text = page.read_text()
    begin, end = text.find(TARGETS_BEGIN), text.find(TARGETS_END)
    if begin < 0 or end < begin:
        return False
    command = " ".join(["python -m bench.suite", settings["argv"]]).strip()
    block = [
        TARGETS_BEGIN,
        "",
        f"Written by `make bench` (`{command}`) on {machine['date']}, from "
        "[bench/results/results.md](../bench/results/results.md):",
        "",
        *targets_table(targets),
        "",
    ]
    page.write_text(text[:begin] + "\n".join(block) + "\n" + text[end:])
    return True
