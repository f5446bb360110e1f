"""The `scan-planning-mode` a table asks engines to use, from its `cedarberg.scan-planning-mode`
property. Without the property nothing is sent: engines plan as they are configured to."""

from __future__ import annotations

from typing import Any

import orjson

PROPERTY = "cedarberg.scan-planning-mode"
CONFIG_KEY = "scan-planning-mode"
_MODES = frozenset({"client", "server"})
_NEEDLE = orjson.dumps(PROPERTY)


def load_config(metadata_json: bytes) -> dict[str, str]:
    """The loadTable `config` entries a table's metadata asks for."""
    # Most tables lack the property: a byte search spares them parsing their metadata.
    if _NEEDLE not in metadata_json:
        return {}
    document: Any = orjson.loads(metadata_json)
    properties = document.get("properties") if isinstance(document, dict) else None
    mode = properties.get(PROPERTY) if isinstance(properties, dict) else None
    return {CONFIG_KEY: mode} if mode in _MODES else {}
