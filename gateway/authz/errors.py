"""Errors of the authorization package.

    AuthzError
     ├── PolicyLoadError        a policy directory that cannot become the active set (carries problems)
     ├── UnknownOperationError  an operation (route) without an entry in the operation table
     └── ResourceError          a resource path or fixture that cannot be turned into Cedar entities

A *denied* request is not an error: decisions are values (`Decision`, `Verdict`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PolicyProblem:
    """One thing wrong with a policy directory, located as precisely as Cedar lets us."""

    path: str  # file name relative to the policy directory (or the directory itself)
    line: int  # 1-based; 0 when the problem has no line (a missing file)
    message: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.message}" if self.line else f"{self.path}: {self.message}"


class AuthzError(Exception):
    """Base of every error raised by `gateway.authz`."""


class PolicyLoadError(AuthzError):
    """The policy set did not parse or validate; `problems` says where and why."""

    def __init__(self, problems: Sequence[PolicyProblem]) -> None:
        self.problems: tuple[PolicyProblem, ...] = tuple(problems)
        first = str(self.problems[0]) if self.problems else "unknown problem"
        more = f" (and {len(self.problems) - 1} more)" if len(self.problems) > 1 else ""
        super().__init__(f"policy set refused: {first}{more}")


class UnknownOperationError(AuthzError):
    """An operation id has no entry in the operation table (or the pipeline's body table,
    `gateway.web.bodies`, is out of step with it), so its route must not be registered."""


class ResourceError(AuthzError):
    """A resource description (CLI path, fixture) that cannot be mapped to Cedar entities."""
