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


def validate_summary(directory: Path, *, extra_files: int = 0, extra_policies: int = 0) -> str:
    """What `cedarberg policies validate` says of `directory` (plus files and policies a test adds):
    counted from the files themselves (every bundled policy carries its `@id`), so adding a bundled
    policy file does not break the tests that check which directory was read."""
    files = sorted(directory.glob("*.cedar"))
    policies = sum(line.startswith("@id(") for f in files for line in f.read_text("utf-8").splitlines())
    return f"{policies + extra_policies} policies in {len(files) + extra_files} file(s) valid"
