"""What the suite needs to know about a running server under test."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path


@dataclass
class Endpoint:
    """A running server: where it listens, how to authenticate, which pid to meter.

    ``system`` is ``cedarberg``, ``seaweedfs`` or ``ceiling``; ``variant`` names the
    configuration (e.g. ``http-1w``: plain HTTP, one worker). ``tokens`` maps a role (``writer``,
    ``admin``) to a bearer token; ``client_id``/``client_secret`` are what the token scenario
    exchanges. ``prefix`` is the catalog route prefix from ``GET /v1/config``.
    """

    system: str
    variant: str
    base_url: str
    pid: int
    workers: int = 1
    tls: bool = False
    cafile: Path | None = None
    prefix: str = ""
    config_query: str = ""
    tokens: dict[str, str] = field(default_factory=dict)
    client_id: str = ""
    client_secret: str = ""
    event_loop: str = "unknown"
    log_path: Path | None = None  # the server's stdout/stderr, for the post-mortem of a crash
    durability: dict[str, str] = field(default_factory=dict)  # Cedarberg: what a commit waits for

    @property
    def label(self) -> str:
        return f"{self.system}/{self.variant}"

    @property
    def catalog_root(self) -> str:
        """``/v1/{prefix}`` (or ``/v1`` without a prefix)."""
        return f"/v1/{self.prefix}" if self.prefix else "/v1"

    def expand(self, template: str) -> str:
        """Fill ``{catalog}`` and ``{config_query}``; ``{n}``/``{t}`` are left for wrk's Lua."""
        return template.replace("{catalog}", self.catalog_root).replace("{config_query}", self.config_query)
