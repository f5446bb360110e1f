"""Bounds of the policy change preview (`[authz.preview]`); `gateway.web.routes.policy_preview`
uses them."""

from __future__ import annotations

from pydantic import Field

from cedarberg.gateway.config.base import FrozenSettings

DEFAULT_DECISIONS = 500


class PolicyPreviewSettings(FrozenSettings):
    """What one change preview (POST /admin/v1/policies/preview) may cost: the body it takes, the
    audited decisions it decides again, the audit file it reads and the time it runs."""

    max_decisions: int = Field(
        10_000,
        ge=0,
        le=1_000_000,
        description="Most audited decisions one preview may decide again (its `decisions`; more: "
        f"400; none given: {DEFAULT_DECISIONS} or this, whichever is less). Each is decided twice "
        "(current and candidate set), about 0.5 ms each on one core. 0: previews only validate and run "
        "fixtures.",
    )
    max_body_bytes: int = Field(
        2 * 1024 * 1024,
        ge=1024,
        le=64 * 1024**2,
        description="Largest preview body (the changed policy files and fixtures); larger: 413. "
        "Each policy file is also held to the loader's 1 MiB. The top-level max_body_bytes applies "
        "first.",
    )
    max_audit_bytes: int = Field(
        256 * 1024**2,
        ge=0,
        le=64 * 1024**3,
        description="Most bytes of the audit file one preview reads, backwards from its end "
        "(audit.destination must be a file); decisions older than that are not decided again.",
    )
    timeout_seconds: float = Field(
        20.0,
        gt=0,
        le=600,
        description="How long one preview may spend deciding audited decisions again; it then "
        "answers with what it decided so far, marked incomplete. One preview runs at a time per "
        "worker; others wait.",
    )
