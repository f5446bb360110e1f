"""Where the Cedar policies live and how decisions are cached (`[authz]`); `gateway.authz` uses them."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field

from cedarberg.gateway.config.base import FrozenSettings
from cedarberg.gateway.config.preview import PolicyPreviewSettings

# The bundled policies: `policies/` at the root of the source tree (next to `gateway/`); this file
# is gateway/config/authz.py, so the root is two directories up.
BUNDLED_POLICY_DIR = Path(__file__).resolve().parents[2] / "policies"


class AuthzSettings(FrozenSettings):
    """Where the Cedar policies live and how they are reloaded."""

    policy_dir: Path = Field(
        BUNDLED_POLICY_DIR,
        description="Directory holding schema.cedarschema and the *.cedar policies "
        "(default: the bundled policies).",
    )
    reload_interval_seconds: float = Field(
        1.0,
        ge=0,
        le=3600,
        description="How often the policy directory is checked for changes; a change is loaded once "
        "it has held still for one check (within two intervals: a file written in place is never "
        "read half-written); 0 turns the watcher off (SIGHUP still reloads).",
    )
    entity_cache_size: int = Field(
        4096, ge=0, le=1_000_000, description="Parsed entity sets kept for reuse between decisions."
    )
    decision_cache_size: int = Field(
        65536,
        ge=0,
        le=10_000_000,
        description="Decisions kept for reuse, keyed by everything they depend on: the policy-set "
        "version, the principal with its groups and attributes, the action, the request context, "
        "and what the policies can see of the resource (its type, its ancestors with their "
        "attributes, the attributes any policy reads, its tags if any policy reads tags, its id if "
        "a policy names it; `gateway/authz/sight.py`). Any change to one of these is a new key, so "
        "resources no policy can tell apart (new namespaces created under different names) share "
        "one decision; a policy reload empties it. 0: decide every request.",
    )
    decision_cache_max_bytes: int = Field(
        64 * 1024**2,
        ge=0,
        le=16 * 1024**3,
        description="Estimated memory the decision cache may hold (keys include the principal, what "
        "the policies see of the resource with its grants, and the request context); least "
        "recently used decisions go first. 0: decide every request.",
    )
    entity_cache_max_bytes: int = Field(
        64 * 1024**2,
        ge=0,
        le=16 * 1024**3,
        description="Estimated memory the parsed entity sets may hold. 0: parse for every decision.",
    )
    cache_max_entry_bytes: int = Field(
        256 * 1024,
        ge=1024,
        le=64 * 1024**2,
        description="Largest decision or entity set (estimated) that is cached; larger ones are "
        "decided without being remembered, so they cannot crowd out the cache.",
    )
    preview: PolicyPreviewSettings = Field(
        default_factory=PolicyPreviewSettings,
        description="Bounds of the policy change preview (POST /admin/v1/policies/preview).",
    )
