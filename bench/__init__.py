"""Cedarberg benchmark suite: ``make bench`` (or ``python -m bench.suite``); see bench/README.md.

The suite starts real ``python -m cedarberg.gateway.cli serve`` processes through the test harness in
``tests/support``; it must not use the harness's fork server (a forked child would share the
harness's imports and memory). Its switch, ``CEDARBERG_TEST_FORKSERVER=0``, is read once when
``tests.support.forkserver`` is imported; the variable must not stay set, because ``cedarberg``
commands read every ``CEDARBERG_*`` variable as a setting (the suite drops them all).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))
# Inside the test suite (tests/bench checks the targets and the report on made-up results), the
# harness, and its fork server, were imported first and are the tests' own: nothing is measured.
if "tests.support.forkserver" not in sys.modules:
    os.environ["CEDARBERG_TEST_FORKSERVER"] = "0"
    from tests.support.forkserver import fork_server

    del os.environ["CEDARBERG_TEST_FORKSERVER"]
    assert fork_server() is None, "the test fork server must be off for benchmarks"
