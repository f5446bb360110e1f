"""Rate limits (`[rate_limits]`); `gateway.ratelimit` enforces them."""

from __future__ import annotations

from urllib.parse import urlsplit

from pydantic import Field, field_validator

from cedarberg.gateway.config.base import FrozenSettings

REDIS_SCHEMES = frozenset({"redis", "rediss", "redis+unix"})


def _check_limit_string(value: str) -> str:
    # Imported when a limit is configured, not with the settings: `limits` is slow to import and
    # every `cedarberg` command loads the settings (`keys list` included).
    from limits import parse_many

    try:
        items = parse_many(value)
    except ValueError as err:
        raise ValueError(f"not a rate limit: {value!r} (expected e.g. '600/minute')") from err
    if not items:
        raise ValueError(f"not a rate limit: {value!r}")
    return value


class RateLimitSettings(FrozenSettings):
    """How requests are limited. Limits use `limits` notation; ``;`` joins several, e.g.
    ``"20/second;600/minute"``, and all must have room. A limit "N per period" is enforced by GCRA
    (`gateway.ratelimit`): a burst of N from a full budget, then N per period steadily (one every
    period / N)."""

    enabled: bool = Field(True, description="Switch all rate limiting off (benchmarks only).")
    storage_uri: str = Field(
        "memory://",
        description="Where budgets are kept: memory:// (one process) or redis://host:port[/db] "
        "(also rediss://, redis+unix://; Redis >= 5) to share one budget between gateway processes.",
    )
    storage_timeout_seconds: float = Field(
        1.0, gt=0, le=30, description="Longest wait for the storage; past it the request gets 503."
    )
    key_prefix: str = Field(
        "cedarberg", min_length=1, pattern=r"^[A-Za-z0-9_.:-]+$", description="Prefix of Redis keys."
    )
    # Read, per-address and token defaults leave >= 5x headroom over one engine's planning burst
    # (50 concurrent queries over 20 tables: at most 300 requests, peaking at 285/s, 225 reads/s
    # and 77 tokens/s from one principal and one address; `bench/engine_burst.py`,
    # docs/performance.md). Failed authentications stay strict.
    per_address: str = Field(
        "2000/second", description="Every request from one client address, before authentication."
    )
    read: str = Field("1500/second", description="Read operations of one principal.")
    write: str = Field("600/minute", description="Write operations of one principal.")
    admin: str = Field("120/minute", description="Admin API operations of one principal.")
    token: str = Field("500/second", description="Token requests (POST /v1/oauth/tokens) of one principal.")
    auth_failures_per_address: str = Field(
        "20/minute", description="Failed authentications from one client address (strict)."
    )
    ipv6_prefix_length: int = Field(
        64, ge=32, le=128, description="IPv6 clients are limited per network of this prefix length."
    )

    @field_validator("per_address", "read", "write", "admin", "token", "auth_failures_per_address")
    @classmethod
    def _limit(cls, value: str) -> str:
        return _check_limit_string(value)

    @field_validator("storage_uri")
    @classmethod
    def _uri(cls, value: str) -> str:
        scheme = urlsplit(value).scheme
        if scheme == "memory" or scheme in REDIS_SCHEMES:
            return value
        raise ValueError(f"unsupported rate-limit storage {scheme!r}: use memory:// or redis://host:port")
