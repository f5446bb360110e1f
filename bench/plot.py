"""results.png: throughput and server CPU per request for every operation, one bar per server
(Cedarberg variants, the SeaweedFS peer, the bare aiohttp ceiling), and the soak's memory."""

from __future__ import annotations

from pathlib import Path

from bench.model import Scenario, Soak
from bench.scenarios import OPERATIONS

COLOURS = {
    "cedarberg/http-1w": "#1f77b4",
    "cedarberg/http-2w": "#6baed6",
    "cedarberg/tls-1w": "#2ca02c",
    "cedarberg/http-1w-pg": "#9467bd",
    "cedarberg/http-2w-pg": "#c5b0d5",
    "seaweedfs/peer": "#ff7f0e",
    "ceiling/bare-aiohttp": "#7f7f7f",
}
# Servers named otherwise (the per-core variants of a run with --cores other than 2) take these.
SPARE_COLOURS = ("#17becf", "#bcbd22", "#e377c2", "#8c564b")


def plot(path: Path, scenarios: list[Scenario], soak: Soak | None) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    usable = [s for s in scenarios if s.usable]
    operations = [op for op in OPERATIONS if any(s.operation == op.name for s in usable)]
    servers = list(dict.fromkeys(_server(s) for s in usable))  # in the order they ran
    spare = iter(SPARE_COLOURS * len(servers))
    colours = {server: COLOURS.get(server) or next(spare) for server in servers}
    rows = 3 if soak is not None else 2
    figure, axes = plt.subplots(rows, 1, figsize=(14, 4.2 * rows), constrained_layout=True)
    width = 0.8 / max(1, len(servers))
    for axis, attribute, label in (
        (axes[0], "rps", "successful req/s (median, log scale)"),
        (axes[1], "cpu_us_per_request", "server CPU µs per request (median, log scale)"),
    ):
        for index, server in enumerate(servers):
            xs, ys, errors_low, errors_high = [], [], [], []
            for position, operation in enumerate(operations):
                found = [s for s in usable if s.operation == operation.name and _server(s) == server]
                if not found:
                    continue
                spread = found[0].spread(attribute)
                xs.append(position + (index - (len(servers) - 1) / 2) * width)
                ys.append(max(spread.median, 1e-3))
                errors_low.append(max(spread.median - spread.low, 0))
                errors_high.append(max(spread.high - spread.median, 0))
            axis.bar(xs, ys, width, label=server, color=colours[server], yerr=[errors_low, errors_high])
        axis.set_yscale("log")
        axis.set_ylabel(label)
        axis.set_xticks(range(len(operations)), [op.title for op in operations], rotation=25, ha="right")
        axis.grid(axis="y", which="both", alpha=0.3)
    axes[0].legend(ncols=len(servers), loc="upper right", fontsize="small")
    axes[0].set_title("Cedarberg vs SeaweedFS Iceberg REST vs bare aiohttp (error bars: min-max)")
    if soak is not None:
        axis = axes[2]
        axis.plot(range(len(soak.samples_mb)), soak.samples_mb, color=COLOURS["cedarberg/http-1w"])
        for factor, band in ((1.1, "±10% of the value after 10 s"), (0.9, None)):
            axis.axhline(soak.baseline_mb * factor, color="red", linestyle="--", linewidth=0.8, label=band)
        axis.set_xlabel("seconds of loadTable at 32 connections (cedarberg/http-1w)")
        axis.set_ylabel("gateway RSS MB")
        axis.set_title("Soak: resident memory")
        axis.legend(loc="lower right", fontsize="small")
    figure.savefig(path, dpi=90)
    plt.close(figure)


def _server(scenario: Scenario) -> str:
    return f"{scenario.system}/{scenario.variant}"
