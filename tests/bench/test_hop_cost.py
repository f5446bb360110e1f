"""`python -m bench.hop_cost` measures both layouts and reports each."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def test_both_layouts_are_measured_and_reported() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "bench.hop_cost", "--round-trips", "200"],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO / "src")},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    lines = done.stdout.strip().splitlines()
    assert [line.split(":")[0].strip() for line in lines] == ["any processor", "one processor"]
    for line in lines:
        found = re.search(r"([\d,]+) round trips/s, CPU per round trip ([\d.]+) µs \(parent\)", line)
        assert found is not None, line
        assert int(found.group(1).replace(",", "")) > 0
