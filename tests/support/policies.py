"""A policy engine over the bundled schema and one file of policies written by a test."""

from __future__ import annotations

import shutil
from pathlib import Path

from cedarberg.gateway.authz.engine import PolicyEngine
from cedarberg.gateway.config.authz import BUNDLED_POLICY_DIR


def generated_engine(directory: Path, policies: str) -> PolicyEngine:
    """An engine, loaded, for the bundled schema and `policies` (Cedar text) in `directory`."""
    shutil.copy(BUNDLED_POLICY_DIR / "schema.cedarschema", directory / "schema.cedarschema")
    (directory / "generated.cedar").write_text(policies)
    engine = PolicyEngine(directory)
    engine.load()
    return engine
