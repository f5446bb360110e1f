"""The real `cedarberg` command in a child process, as the CLI tests drive it.

The child gets this process's environment without any `CEDARBERG_*` variable (a developer's
shell must not change what a test sees) plus what the test names, and runs in the repository
unless the test names a directory (the policy tools look for a deployment in `./.cedarberg`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from tests.support.gateway import REPO_ROOT

CEDARBERG = (sys.executable, "-m", "cedarberg.gateway.cli")
TIMEOUT_SECONDS = 120


def clean_environ(**extra: str) -> dict[str, str]:
    """The environment without any `CEDARBERG_*` variable, plus `extra`."""
    clean = {k: v for k, v in os.environ.items() if not k.startswith("CEDARBERG_")}
    return {**clean, **extra}


def run_cedarberg(
    *args: str, cwd: Path = REPO_ROOT, env: Mapping[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`cedarberg ARGS`, to completion: exit code, stdout and stderr as text."""
    return subprocess.run(
        [*CEDARBERG, *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_SECONDS,
        check=False,
        cwd=cwd,
        env=dict(env) if env is not None else clean_environ(),
    )
