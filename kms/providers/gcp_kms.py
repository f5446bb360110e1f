"""`gcp-kms://projects/P/locations/L/keyRings/R/cryptoKeys/K` — Google Cloud KMS (async gRPC client).

Cloud KMS has no "generate data key": the gateway draws the 32-byte data key from the OS and
wraps it with Encrypt. The context goes in as `additional_authenticated_data`, so Cloud KMS
refuses to decrypt under another context. `kek_version` is the CryptoKeyVersion that Encrypt
reports; Decrypt takes the CryptoKey and finds the version in the ciphertext itself, so keys
wrapped before a rotation keep unwrapping.

Integrity: every request carries CRC32C checksums and every answer's checksums are verified, as
Google recommends; a mismatch means corruption in transit and is KmsUnavailableError (retry).

The client is created on first use, inside the running event loop (a grpc.aio channel belongs
to the loop it was made in).
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import re
from pathlib import Path
from typing import Any

from google.api_core import exceptions as api_exceptions
from google.api_core import retry_async
from google.auth import exceptions as auth_exceptions
from google.cloud import kms_v1

from cedarberg.kms.errors import KmsError, KmsRefusedError, KmsUnavailableError
from cedarberg.kms.keys import DATA_KEY_BYTES, Context, DataKey, WrappedKey, context_bytes
from cedarberg.kms.settings import KmsSettings

SCHEME = "gcp-kms://"
_NAME = re.compile(r"^projects/[^/\s]+/locations/[^/\s]+/keyRings/[^/\s]+/cryptoKeys/[^/\s]+$")

# Google's answer to these is final for this request; anything else may heal and is retryable.
_REFUSED: tuple[type[Exception], ...] = (
    api_exceptions.PermissionDenied,
    api_exceptions.NotFound,
    api_exceptions.InvalidArgument,
    api_exceptions.FailedPrecondition,
    api_exceptions.Unauthenticated,
    api_exceptions.OutOfRange,
    auth_exceptions.DefaultCredentialsError,
    auth_exceptions.RefreshError,
)


def open_provider(kek_uri: str, settings: KmsSettings, local_key_dir: Path) -> GcpKmsProvider:
    """Build the provider; no network I/O. Raises KmsError for a malformed URI or an insecure
    endpoint that is not on loopback."""
    del local_key_dir  # only the local provider keeps keys on disk
    name = kek_uri[len(SCHEME) :] if kek_uri.startswith(SCHEME) else ""
    if not _NAME.match(name):
        raise KmsError(f"expected gcp-kms://projects/P/locations/L/keyRings/R/cryptoKeys/K, got {kek_uri!r}")
    gcp = settings.gcp
    if gcp.insecure_loopback and not (gcp.endpoint and _is_loopback(gcp.endpoint)):
        raise KmsError("gcp-kms insecure_loopback needs an endpoint on a loopback address")
    return GcpKmsProvider(kek_uri, name, settings)


class GcpKmsProvider:
    """KeyProvider over Cloud KMS."""

    def __init__(self, kek_uri: str, name: str, settings: KmsSettings) -> None:
        self._kek_uri = kek_uri
        self._name = name
        self._settings = settings
        self._client: kms_v1.KeyManagementServiceAsyncClient | None = None

    @property
    def kek_uri(self) -> str:
        return self._kek_uri

    @property
    def carries_context(self) -> bool:
        return True

    async def generate_data_key(self, context: Context) -> DataKey:
        plaintext = os.urandom(DATA_KEY_BYTES)
        return DataKey(plaintext, await self.wrap(plaintext, context))

    async def wrap(self, plaintext: bytes, context: Context) -> WrappedKey:
        aad = context_bytes(context)
        request = {
            "name": self._name,
            "plaintext": plaintext,
            "plaintext_crc32c": crc32c(plaintext),
            "additional_authenticated_data": aad,
            "additional_authenticated_data_crc32c": crc32c(aad),
        }
        response = await self._call("Encrypt", lambda c, kw: c.encrypt(request=request, **kw))
        if not (
            response.verified_plaintext_crc32c and response.verified_additional_authenticated_data_crc32c
        ):
            raise KmsUnavailableError(
                "gcp-kms Encrypt: request checksums not verified (corrupted in transit)"
            )
        if response.ciphertext_crc32c != crc32c(response.ciphertext):
            raise KmsUnavailableError("gcp-kms Encrypt: ciphertext checksum mismatch (corrupted in transit)")
        if not response.name.startswith(self._name + "/cryptoKeyVersions/"):
            raise KmsUnavailableError("gcp-kms Encrypt: answer names another key")
        return WrappedKey(self._kek_uri, response.name, bytes(response.ciphertext))

    async def unwrap(self, wrapped: WrappedKey, context: Context) -> bytes:
        if wrapped.kek_uri != self._kek_uri:
            raise KmsRefusedError(f"gcp-kms: wrapped key belongs to another KEK ({wrapped.kek_uri})")
        aad = context_bytes(context)
        request = {
            "name": self._name,
            "ciphertext": wrapped.ciphertext,
            "ciphertext_crc32c": crc32c(wrapped.ciphertext),
            "additional_authenticated_data": aad,
            "additional_authenticated_data_crc32c": crc32c(aad),
        }
        response = await self._call("Decrypt", lambda c, kw: c.decrypt(request=request, **kw))
        plaintext = bytes(response.plaintext)
        if response.plaintext_crc32c != crc32c(plaintext):
            raise KmsUnavailableError("gcp-kms Decrypt: plaintext checksum mismatch (corrupted in transit)")
        return plaintext

    async def current_version(self) -> str:
        response = await self._call("GetCryptoKey", lambda c, kw: c.get_crypto_key(name=self._name, **kw))
        if not response.primary.name:
            raise KmsRefusedError("gcp-kms GetCryptoKey: the key has no primary version")
        return str(response.primary.name)

    async def aclose(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            await client.transport.close()  # type: ignore[no-untyped-call]

    async def _call(self, operation: str, call: Any) -> Any:
        timeout = self._settings.timeout_seconds
        # Transient failures are retried briefly; the whole call never outlives `timeout_seconds`.
        retry = retry_async.AsyncRetry(
            predicate=retry_async.if_exception_type(
                api_exceptions.ServiceUnavailable, api_exceptions.DeadlineExceeded
            ),
            initial=0.1,
            maximum=1.0,
            timeout=timeout,
        )
        try:
            async with asyncio.timeout(timeout):
                return await call(self._open_client(), {"retry": retry, "timeout": timeout})
        except TimeoutError as err:
            raise KmsUnavailableError(f"gcp-kms {operation} timed out") from err
        except _REFUSED as err:
            raise KmsRefusedError(f"gcp-kms {operation} refused: {type(err).__name__}") from err
        except (api_exceptions.GoogleAPIError, auth_exceptions.GoogleAuthError) as err:
            raise KmsUnavailableError(f"gcp-kms {operation} failed: {type(err).__name__}") from err

    def _open_client(self) -> kms_v1.KeyManagementServiceAsyncClient:
        if self._client is not None:
            return self._client
        gcp = self._settings.gcp
        if gcp.insecure_loopback and gcp.endpoint:
            import grpc
            from google.auth.credentials import AnonymousCredentials
            from google.cloud.kms_v1.services.key_management_service.transports import (
                KeyManagementServiceGrpcAsyncIOTransport,
            )

            transport = KeyManagementServiceGrpcAsyncIOTransport(
                channel=grpc.aio.insecure_channel(gcp.endpoint),
                credentials=AnonymousCredentials(),  # type: ignore[no-untyped-call]
            )
            self._client = kms_v1.KeyManagementServiceAsyncClient(transport=transport)
        else:
            credentials = None
            if gcp.credentials_file is not None:
                from google.oauth2 import service_account

                credentials = service_account.Credentials.from_service_account_file(  # type: ignore[no-untyped-call]
                    str(gcp.credentials_file), scopes=["https://www.googleapis.com/auth/cloudkms"]
                )
            from google.api_core.client_options import ClientOptions

            options = ClientOptions(api_endpoint=gcp.endpoint) if gcp.endpoint else None
            self._client = kms_v1.KeyManagementServiceAsyncClient(
                credentials=credentials, client_options=options
            )
        return self._client


def _is_loopback(endpoint: str) -> bool:
    host = endpoint.rsplit(":", 1)[0].strip("[]") if ":" in endpoint else endpoint
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _crc32c_table() -> tuple[int, ...]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
        table.append(crc)
    return tuple(table)


_CRC32C_TABLE = _crc32c_table()


def crc32c(data: bytes) -> int:
    """CRC32C (Castagnoli), as Cloud KMS checksums. Pure Python: the inputs are a few hundred
    bytes at most, and `google-crc32c` is not a dependency of google-cloud-kms."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc = _CRC32C_TABLE[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF
