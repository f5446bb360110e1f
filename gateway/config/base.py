"""The one base of every settings model of the gateway.

Settings are read once at start-up and shared by every request and task, so they are frozen (a
model cannot be changed behind a reader's back), and an unknown key is an error, never silently
ignored (a misspelt setting would otherwise leave its default in force).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class FrozenSettings(BaseModel):
    """A settings model: frozen, and refusing keys it does not define."""

    model_config = ConfigDict(frozen=True, extra="forbid")
