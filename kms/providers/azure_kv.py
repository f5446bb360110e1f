"""`azure-kv://VAULT-HOST[:PORT]/keys/NAME[/VERSION]` — Azure Key Vault / Managed HSM key wrapping.

Data keys are drawn from the OS and wrapped by the vault: RSA-OAEP-256 for RSA keys, A256KW for
(256-bit) `oct-HSM` keys. Key Vault's wrapKey cannot bind associated data, so this provider has
`carries_context=False` and refuses a non-empty context rather than dropping it.

Without a pinned VERSION, each wrap first reads the key (GET /keys/NAME) to learn its current
version and type, then wraps under exactly that version, so `kek_version` is the version the
vault actually used. Unwrap goes to the version recorded in the wrapped key.

Wrapping is always done BY THE VAULT. The SDK's CryptographyClient, built from a key id, first
GETs the key and, if the answer lists the operation, performs it locally: with the public key for
RSA (harmless but not what we audit), and for an `oct-HSM` key — whose GET carries no key material
— with a *random* local key, producing a blob nobody can ever unwrap. The SDK skips that GET and
stays remote for good once it has seen a 403 on it (the least-privilege setup: wrapKey/unwrapKey
without get). `_remote_only_client` puts a fresh client straight into that state by setting
`_keys_get_forbidden` (private SDK state: pinned by tests/kms/test_providers.py, which proves a
second, fresh client unwraps what the first wrapped, for both key types, and that the fake vault
saw the wrapkey call). `_check_remote` additionally refuses a result if a local provider ever
appears, so an SDK change fails closed instead of silently wrapping locally.
"""

from __future__ import annotations

import asyncio
import os
import re
import time
from pathlib import Path
from types import TracebackType
from typing import Any

from azure.core.credentials import AccessToken
from azure.core.credentials_async import AsyncTokenCredential
from azure.core.exceptions import (
    ClientAuthenticationError,
    HttpResponseError,
    ResourceNotFoundError,
    ServiceRequestError,
    ServiceResponseError,
)
from azure.keyvault.keys import KeyOperation, KeyType, KeyVaultKeyIdentifier
from azure.keyvault.keys.aio import KeyClient
from azure.keyvault.keys.crypto import KeyWrapAlgorithm
from azure.keyvault.keys.crypto.aio import CryptographyClient

from cedarberg.kms.errors import KmsError, KmsRefusedError, KmsUnavailableError, UnsupportedContextError
from cedarberg.kms.keys import DATA_KEY_BYTES, Context, DataKey, WrappedKey
from cedarberg.kms.settings import KmsSettings

SCHEME = "azure-kv://"
_URI = re.compile(
    r"^azure-kv://(?P<host>[A-Za-z0-9.-]+(?::[0-9]{1,5})?)/keys/(?P<name>[A-Za-z0-9-]{1,127})"
    r"(?:/(?P<version>[A-Za-z0-9]{1,64}))?$"
)
_RSA_TYPES = {KeyType.rsa, KeyType.rsa_hsm}
_OCT_TYPES = {KeyType.oct, KeyType.oct_hsm}


def open_provider(kek_uri: str, settings: KmsSettings, local_key_dir: Path) -> AzureKeyVaultProvider:
    """Build the provider; no network I/O. Raises KmsError for a malformed URI."""
    del local_key_dir  # only the local provider keeps keys on disk
    match = _URI.match(kek_uri)
    if match is None:
        raise KmsError(f"expected azure-kv://VAULT-HOST[:PORT]/keys/NAME[/VERSION], got {kek_uri!r}")
    return AzureKeyVaultProvider(
        kek_uri, f"https://{match['host']}", match["name"], match["version"], settings
    )


class AzureKeyVaultProvider:
    """KeyProvider over Key Vault wrapKey/unwrapKey. SDK clients are created on first use."""

    def __init__(
        self, kek_uri: str, vault_url: str, name: str, pinned_version: str | None, settings: KmsSettings
    ) -> None:
        self._kek_uri = kek_uri
        self._vault_url = vault_url
        self._name = name
        self._pinned = pinned_version
        self._settings = settings
        self._credential: AsyncTokenCredential | None = None
        self._key_client: KeyClient | None = None
        self._crypto: dict[str, CryptographyClient] = {}  # by key version
        self._algorithms: dict[str, KeyWrapAlgorithm] = {}  # by key version: versions are immutable

    @property
    def kek_uri(self) -> str:
        return self._kek_uri

    @property
    def carries_context(self) -> bool:
        return False

    async def generate_data_key(self, context: Context) -> DataKey:
        _refuse_context(context)
        plaintext = os.urandom(DATA_KEY_BYTES)
        return DataKey(plaintext, await self.wrap(plaintext, context))

    async def wrap(self, plaintext: bytes, context: Context) -> WrappedKey:
        _refuse_context(context)
        async with self._bounded("wrapKey"):
            version = self._pinned or await self._latest_version()
            algorithm = await self._algorithm(version)
            crypto = self._remote_only_client(version)
            result = await crypto.wrap_key(algorithm, plaintext)
            _check_remote(crypto, algorithm)
        used = KeyVaultKeyIdentifier(str(result.key_id)).version
        if used != version:
            raise KmsUnavailableError("azure-kv wrapKey: answer names another key version")
        return WrappedKey(self._kek_uri, version, bytes(result.encrypted_key))

    async def unwrap(self, wrapped: WrappedKey, context: Context) -> bytes:
        _refuse_context(context)
        if wrapped.kek_uri != self._kek_uri:
            raise KmsRefusedError(f"azure-kv: wrapped key belongs to another KEK ({wrapped.kek_uri})")
        if not re.fullmatch(r"[A-Za-z0-9]{1,64}", wrapped.kek_version):
            raise KmsRefusedError("azure-kv: wrapped key names a malformed key version")
        async with self._bounded("unwrapKey"):
            algorithm = await self._algorithm(wrapped.kek_version)
            crypto = self._remote_only_client(wrapped.kek_version)
            result = await crypto.unwrap_key(algorithm, wrapped.ciphertext)
            _check_remote(crypto, algorithm)
        return bytes(result.key)

    async def current_version(self) -> str:
        if self._pinned:
            return self._pinned
        async with self._bounded("get key"):
            return await self._latest_version()

    async def aclose(self) -> None:
        clients: list[Any] = [*self._crypto.values(), self._key_client, self._credential]
        self._crypto, self._key_client, self._credential = {}, None, None
        for client in clients:
            if client is not None:
                await client.close()

    async def _latest_version(self) -> str:
        key = await self._keys().get_key(self._name)
        version = key.properties.version
        if not version:
            raise KmsUnavailableError("azure-kv get key: answer without a version")
        self._algorithms.setdefault(version, _algorithm_for(key.key_type))
        return version

    async def _algorithm(self, version: str) -> KeyWrapAlgorithm:
        if version not in self._algorithms:
            key = await self._keys().get_key(self._name, version)
            self._algorithms[version] = _algorithm_for(key.key_type)
        return self._algorithms[version]

    def _keys(self) -> KeyClient:
        if self._key_client is None:
            self._key_client = KeyClient(self._vault_url, self._open_credential(), **self._client_options())
        return self._key_client

    def _remote_only_client(self, version: str) -> CryptographyClient:
        """A CryptographyClient for one key version that never does crypto locally (see the
        module docstring): it never GETs the key, so it never builds a local provider."""
        crypto = self._crypto.get(version)
        if crypto is None:
            key_id = f"{self._vault_url}/keys/{self._name}/{version}"
            crypto = CryptographyClient(key_id, self._open_credential(), **self._client_options())
            crypto._keys_get_forbidden = True  # the SDK's own "no keys/get permission" state
            self._crypto[version] = crypto
        return crypto

    def _open_credential(self) -> AsyncTokenCredential:
        if self._credential is None:
            azure = self._settings.azure
            if azure.static_token is not None:
                self._credential = StaticTokenCredential(azure.static_token.get_secret_value())
            elif azure.tenant_id and azure.client_id and azure.client_secret:
                from azure.identity.aio import ClientSecretCredential

                self._credential = ClientSecretCredential(
                    azure.tenant_id, azure.client_id, azure.client_secret.get_secret_value()
                )
            else:
                from azure.identity.aio import DefaultAzureCredential

                self._credential = DefaultAzureCredential()
        return self._credential

    def _client_options(self) -> dict[str, Any]:
        azure = self._settings.azure
        timeout = self._settings.timeout_seconds
        options: dict[str, Any] = {
            "verify_challenge_resource": azure.verify_challenge_resource,
            "connection_timeout": timeout,
            "read_timeout": timeout,
            "retry_total": 1,
            "retry_backoff_factor": 0.2,
        }
        if azure.ca_file is not None:
            options["connection_verify"] = str(azure.ca_file)
        return options

    def _bounded(self, operation: str) -> _Bounded:
        return _Bounded(operation, self._settings.timeout_seconds)


class _Bounded:
    """Bounds a block by the KMS timeout and maps Azure SDK errors to kms errors."""

    def __init__(self, operation: str, timeout: float) -> None:
        self._operation = operation
        self._timeout = asyncio.timeout(timeout)

    async def __aenter__(self) -> None:
        await self._timeout.__aenter__()

    async def __aexit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        try:
            await self._timeout.__aexit__(kind, err, tb)
        except TimeoutError as timeout:
            raise KmsUnavailableError(f"azure-kv {self._operation} timed out") from timeout
        op = self._operation
        if isinstance(err, ClientAuthenticationError | ResourceNotFoundError):
            raise KmsRefusedError(f"azure-kv {op} refused: {type(err).__name__}") from err
        if isinstance(err, HttpResponseError):
            status = err.status_code or 0
            if status >= 500 or status in (408, 429) or status == 0:
                raise KmsUnavailableError(f"azure-kv {op} failed: HTTP {status}") from err
            raise KmsRefusedError(f"azure-kv {op} refused: HTTP {status}") from err
        if isinstance(err, ServiceRequestError | ServiceResponseError):
            raise KmsUnavailableError(f"azure-kv {op} failed: {type(err).__name__}") from err


class StaticTokenCredential:
    """An async credential handing out one fixed bearer token (sidecar-issued tokens, tests)."""

    def __init__(self, token: str) -> None:
        self._token = token

    async def get_token(
        self,
        *scopes: str,
        claims: str | None = None,
        tenant_id: str | None = None,
        enable_cae: bool = False,
        **kwargs: Any,
    ) -> AccessToken:
        return AccessToken(self._token, int(time.time()) + 3600)

    async def close(self) -> None:
        return None

    async def __aenter__(self) -> StaticTokenCredential:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None = None,
        err: BaseException | None = None,
        tb: TracebackType | None = None,
    ) -> None:
        return None


def _algorithm_for(key_type: KeyType | str | None) -> KeyWrapAlgorithm:
    if key_type in _RSA_TYPES:
        return KeyWrapAlgorithm.rsa_oaep_256
    if key_type in _OCT_TYPES:
        return KeyWrapAlgorithm.aes_256
    raise KmsRefusedError(f"azure-kv: key type {key_type} cannot wrap keys (use RSA or oct-HSM)")


def _check_remote(crypto: CryptographyClient, algorithm: KeyWrapAlgorithm) -> None:
    # Fail closed if the SDK ever built a local provider despite `_keys_get_forbidden`.
    local = getattr(crypto, "_local_provider", None)
    if local is None or local.supports(KeyOperation.wrap_key, algorithm):
        raise KmsError("azure-kv: the SDK would wrap locally; refusing (see kms.providers.azure_kv)")


def _refuse_context(context: Context) -> None:
    if context:
        raise UnsupportedContextError("azure-kv wrapKey cannot bind an encryption context")
