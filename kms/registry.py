"""The closed registry of KMS providers, keyed by KEK URI scheme.

Each provider module is imported only when a KEK of its scheme is used, so an SDK that is not
installed (an extra) costs nothing until it is needed, and then fails with a clear message.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from pathlib import Path
from typing import cast

from cedarberg.kms.errors import UnknownProviderError
from cedarberg.kms.provider import KeyProvider
from cedarberg.kms.settings import KmsSettings

# scheme -> (module, extra that installs its SDK)
PROVIDERS: dict[str, tuple[str, str | None]] = {
    "local": ("cedarberg.kms.providers.local", None),
    "aws-kms": ("cedarberg.kms.providers.aws_kms", "aws"),
    "vault-transit": ("cedarberg.kms.providers.vault_transit", None),
    "gcp-kms": ("cedarberg.kms.providers.gcp_kms", "gcp"),
    "azure-kv": ("cedarberg.kms.providers.azure_kv", "azure"),
}

ProviderFactory = Callable[[str, KmsSettings, Path], KeyProvider]


def scheme_of(kek_uri: str) -> str:
    scheme, sep, _ = kek_uri.partition("://")
    if not sep or scheme not in PROVIDERS:
        raise UnknownProviderError(
            f"unknown KEK URI scheme {scheme!r}; expected one of {', '.join(sorted(PROVIDERS))}"
        )
    return scheme


def open_provider(kek_uri: str, settings: KmsSettings, local_key_dir: Path) -> KeyProvider:
    """Build the provider for `kek_uri`. Raises UnknownProviderError, or KmsError from the
    provider if the URI or its settings are unusable, or if the SDK extra is missing."""
    scheme = scheme_of(kek_uri)
    module_name, extra = PROVIDERS[scheme]
    try:
        module = importlib.import_module(module_name)
    except ImportError as err:
        hint = f" (pip install 'cedarberg[{extra}]')" if extra else ""
        raise UnknownProviderError(f"KMS provider for {scheme}:// unavailable{hint}") from err
    factory = cast(ProviderFactory, module.open_provider)
    return factory(kek_uri, settings, local_key_dir)
