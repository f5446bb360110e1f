"""Where audit records go (`[audit]`); `gateway.audit` writes them."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from cedarberg.gateway.config.base import FrozenSettings


class AuditSettings(FrozenSettings):
    """Where audit records go, how durably a mutation's records are written before it is
    acknowledged, and what reads do while the destination cannot take records."""

    destination: str = Field(
        "stdout", min_length=1, description='"stdout", or the path of a file that JSON lines are appended to.'
    )
    queue_size: int = Field(
        10_000,
        ge=1,
        le=1_000_000,
        description="Records that may wait for the writer before recording waits; while the "
        "destination is failing, the records kept for it (beyond that, every request is refused).",
    )
    durability: Literal["fsync", "write"] = Field(
        "fsync",
        description='Before a mutation is applied and before it is acknowledged, its records are: "fsync": '
        'written and synced to disk (they survive a crash of the machine); "write": written to the '
        "operating system (they survive a crash of the gateway, not of the machine). Concurrent "
        "mutations share one write and sync. Reads never wait for either.",
    )
    reads_when_failing: Literal["serve", "refuse"] = Field(
        "serve",
        description='While the destination cannot take records (mutations then fail with 503): "serve": '
        "reads are answered and their records kept in memory, in order, written when it recovers "
        '(at most `queue_size`; beyond that reads are refused too); "refuse": reads are refused '
        "with 503 as well.",
    )
    retry_interval_seconds: float = Field(
        1.0,
        gt=0,
        le=60,
        description="How often a destination that failed is tried again (reopened at its path if it "
        "was removed or replaced); recording resumes by itself once it takes records.",
    )
    refusal_interval_seconds: float = Field(
        60.0,
        gt=0,
        le=3600,
        description="Failed authentications (401) and throttled requests (429) are recorded per "
        "source (client address, action, reason, presented key id): its first refusal in each "
        "interval at once, the rest as one record counting them at the interval's end, so a flood "
        "writes a bounded number of lines.",
    )
    refusal_max_sources: int = Field(
        10_000,
        ge=1,
        le=1_000_000,
        description="Sources of 401/429 refusals tracked per interval (a few hundred bytes each); "
        'refusals from further sources are counted together under client address "*".',
    )

    @field_validator("destination")
    @classmethod
    def _destination(cls, value: str) -> str:
        if value != "stdout" and not Path(value).is_absolute():
            raise ValueError('audit destination must be "stdout" or an absolute file path')
        return value
