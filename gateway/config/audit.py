"""Where audit records go (`[audit]`); `gateway.audit` writes them."""

from __future__ import annotations

from pathlib import Path

from pydantic import Field, field_validator

from cedarberg.gateway.config.base import FrozenSettings


class AuditSettings(FrozenSettings):
    """Where audit records go."""

    destination: str = Field(
        "stdout", min_length=1, description='"stdout", or the path of a file that JSON lines are appended to.'
    )
    queue_size: int = Field(
        10_000, ge=1, le=1_000_000, description="Records that may wait for the writer before recording waits."
    )

    @field_validator("destination")
    @classmethod
    def _destination(cls, value: str) -> str:
        if value != "stdout" and not Path(value).is_absolute():
            raise ValueError('audit destination must be "stdout" or an absolute file path')
        return value
