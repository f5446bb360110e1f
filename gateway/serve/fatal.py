"""How a server that cannot serve says why: one line on stderr and exit status 1 (a refused
policy set adds one indented line per problem, FILE:LINE first, at most `MAX_PROBLEM_LINES`).

Used by `cedarberg serve` for what fails before or while it starts, and by every forked worker
for what fails in it (`gateway.serve.supervisor`), so both report a setup error the same way.
"""

from __future__ import annotations

import sys

from cedarberg.catalog.errors import CatalogError
from cedarberg.gateway.authn.tokens import TokenKeyError
from cedarberg.gateway.authz.errors import PolicyLoadError
from cedarberg.gateway.config.settings import Settings
from cedarberg.gateway.serve.listen import ListenError
from cedarberg.gateway.tls import PlainHttpRefusedError, TlsConfigError
from cedarberg.kms.errors import KmsError

# Errors that mean "this configuration cannot serve": reported in one line, exit status 1.
_FATAL = (
    CatalogError,
    KmsError,
    TlsConfigError,
    PlainHttpRefusedError,
    PolicyLoadError,
    TokenKeyError,
    ListenError,
)

MAX_PROBLEM_LINES = 20  # the rest: `cedarberg policies validate` lists every one


def report_fatal(err: Exception, settings: Settings) -> int:
    """Print why serving is impossible in one line (no traceback) and return the exit status;
    re-raise anything that is a bug rather than a configuration or environment problem."""
    if isinstance(err, _FATAL):
        print(f"cedarberg: {err}", file=sys.stderr)
        if isinstance(err, PolicyLoadError) and len(err.problems) > 1:
            for problem in err.problems[:MAX_PROBLEM_LINES]:
                print(f"  {problem}", file=sys.stderr)
            if len(err.problems) > MAX_PROBLEM_LINES:
                rest = len(err.problems) - MAX_PROBLEM_LINES
                print(f"  ... {rest} more: `cedarberg policies validate` lists them all", file=sys.stderr)
        return 1
    if isinstance(err, OSError) and err.filename is not None:
        print(f"cedarberg: {err.filename}: {err.strerror}", file=sys.stderr)
        return 1
    if isinstance(err, OSError):
        print(f"cedarberg: cannot listen on {settings.host}:{settings.port}: {err.strerror}", file=sys.stderr)
        return 1
    raise err
