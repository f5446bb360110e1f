"""The one interface every KMS provider implements.

A provider holds one key-encryption key (KEK), named by its URI, and can also unwrap keys that
were wrapped under other versions of that KEK. The SDK behind a provider is imported lazily in its
module (see `kms.registry`), so the gateway starts without the optional extras installed.
"""

from __future__ import annotations

from typing import Protocol

from cedarberg.kms.keys import Context, DataKey, WrappedKey


class KeyProvider(Protocol):
    @property
    def kek_uri(self) -> str:
        """The KEK this provider wraps new data keys under (canonical URI)."""
        ...

    @property
    def carries_context(self) -> bool:
        """True if the KMS binds an encryption context / AAD to wrapped keys. A provider that
        cannot raises UnsupportedContextError when given a non-empty context."""
        ...

    async def generate_data_key(self, context: Context) -> DataKey:
        """A fresh 256-bit data key and its wrapped form under the current KEK version."""
        ...

    async def wrap(self, plaintext: bytes, context: Context) -> WrappedKey:
        """Wrap an existing data key under the current KEK version (used by rotation)."""
        ...

    async def unwrap(self, wrapped: WrappedKey, context: Context) -> bytes:
        """The plaintext data key. Raises KmsRefusedError if the KMS will not decrypt it (wrong
        context, tampered blob, disabled key) and KmsUnavailableError if it cannot be reached."""
        ...

    async def current_version(self) -> str:
        """The KEK version new keys are wrapped under now."""
        ...

    async def aclose(self) -> None: ...
