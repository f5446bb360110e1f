"""Settings of the read-path caches (`[cache]`). Each cache is bounded; each can be turned off."""

from __future__ import annotations

from pydantic import Field

from cedarberg.catalog import parsed_metadata
from cedarberg.catalog.load_results import DEFAULT_MAX_AGE_SECONDS, DEFAULT_MAX_BYTES
from cedarberg.catalog.store.cache import DEFAULT_MAX_ENTRIES, DEFAULT_TTL_SECONDS
from cedarberg.gateway.config.base import FrozenSettings

# Mirrors of `gateway.web.replay`'s defaults (config must not import the web layer).
DEFAULT_PLAN_MAX_ENTRIES = 16384
DEFAULT_PLAN_MAX_BYTES = 32 * 1024**2


class ReadCacheSettings(FrozenSettings):
    """The read-path caches (`[cache]`); the data key cache is `kms.settings.CacheSettings`."""

    registry_ttl_seconds: float = Field(
        DEFAULT_TTL_SECONDS,
        ge=0,
        le=60,
        description="How long a registry read (table pointer, namespace properties and grants, "
        "listing page) is reused for reads. A process forgets what it writes at once; a change "
        "made by another worker or instance is seen within this time. 0: every read goes to the "
        "registry (mutations always do).",
    )
    registry_max_entries: int = Field(
        DEFAULT_MAX_ENTRIES, ge=0, le=10_000_000, description="Most registry reads kept per worker."
    )
    load_result_max_bytes: int = Field(
        DEFAULT_MAX_BYTES,
        ge=0,
        le=16 * 1024**3,
        description="Memory per worker for unsealed loadTable/loadView responses, kept per metadata "
        "version (a new version is a new entry, so nothing stale is ever served). 0: off.",
    )
    load_result_max_age_seconds: float = Field(
        DEFAULT_MAX_AGE_SECONDS,
        gt=0,
        le=86_400,
        description="Longest an unsealed response stays in memory (a dropped table's plaintext "
        "leaves memory within this time). Never longer than kms.cache.max_age_seconds, and "
        "nothing is kept when the data-key cache is off: reads then always reach the KMS.",
    )
    plan_max_entries: int = Field(
        DEFAULT_PLAN_MAX_ENTRIES,
        ge=0,
        le=10_000_000,
        description="Most request plans kept per worker: a read's decided outcome (principal, "
        "decisions, answer) replayed for the same credential, path and client while the policy "
        "version, the registry entries it read and the credential are unchanged. 0: off.",
    )
    plan_max_bytes: int = Field(
        DEFAULT_PLAN_MAX_BYTES,
        ge=0,
        le=16 * 1024**3,
        description="Memory per worker for request plans (they hold the answer's bytes). Plans "
        "follow the load-result cache's age limit and are off when it is. 0: off.",
    )
    parsed_metadata_max_bytes: int = Field(
        parsed_metadata.DEFAULT_MAX_BYTES,
        ge=0,
        le=16 * 1024**3,
        description="Memory per worker (estimated) for parsed table and view metadata, kept per "
        "metadata version so that a commit does not parse again what the previous commit built; "
        "the data key is still unwrapped and the stored copy opened on every commit. Kept no "
        "longer than kms.cache.max_age_seconds, and not at all when the data-key cache is off. "
        "0: off.",
    )
