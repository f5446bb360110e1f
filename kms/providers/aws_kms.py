"""`aws-kms://KEY` — AWS KMS through boto3.

KEY is a key id, `alias/NAME` or a key ARN. New data keys come from GenerateDataKey (AES_256);
the encryption context is passed as KMS `EncryptionContext`, so KMS itself refuses to decrypt a
wrapped key under any other context. `kek_version` is the key ARN KMS reports as `KeyId`: an alias
can be re-pointed to a new key (that is how a KEK is rotated to a new key here), and Decrypt is
then pinned to the key that actually wrapped the data key.

boto3 is blocking, so every call runs in a worker thread. botocore's own retries are bounded and
its timeouts short; the whole call is also bounded by `timeout_seconds`.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import boto3
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, ConnectionError, HTTPClientError

from cedarberg.kms.errors import KmsError, KmsRefusedError, KmsUnavailableError
from cedarberg.kms.keys import DATA_KEY_BYTES, Context, DataKey, WrappedKey
from cedarberg.kms.settings import KmsSettings

SCHEME = "aws-kms://"

# Error codes meaning "KMS looked at the request and said no"; anything else it answers with is
# treated as a transient failure (throttling, 5xx, ...), which fails closed and is retried later.
_REFUSED_CODES = frozenset(
    {
        "NotFoundException",
        "DisabledException",
        "InvalidCiphertextException",
        "AccessDeniedException",
        "AccessDeniedError",
        "IncorrectKeyException",
        "KMSInvalidStateException",
        "InvalidKeyUsageException",
        "KeyUnavailableException",
        "ValidationException",
        "InvalidGrantTokenException",
        "UnrecognizedClientException",
        "InvalidSignatureException",
    }
)

# botocore's ConnectionError covers EndpointConnectionError and Connect/ReadTimeoutError.
_TRANSPORT_ERRORS = (ConnectionError, HTTPClientError)

T = TypeVar("T")


def open_provider(kek_uri: str, settings: KmsSettings, local_key_dir: Path) -> AwsKmsProvider:
    """Build the provider; no network I/O. Raises KmsError for a malformed URI."""
    del local_key_dir  # only the local provider keeps keys on disk
    if not kek_uri.startswith(SCHEME):
        raise KmsError(f"not an aws-kms KEK URI: {kek_uri!r}")
    key_id = kek_uri[len(SCHEME) :]
    if not key_id or any(ch.isspace() for ch in key_id) or key_id.startswith("/"):
        raise KmsError(f"aws-kms KEK URI needs a key id, alias/NAME or key ARN: {kek_uri!r}")
    return AwsKmsProvider(kek_uri, key_id, settings)


class AwsKmsProvider:
    """KeyProvider over AWS KMS. Thread-safe; the boto3 client is built on first use."""

    def __init__(self, kek_uri: str, key_id: str, settings: KmsSettings) -> None:
        self._kek_uri = kek_uri
        self._key_id = key_id
        self._settings = settings
        self._client: Any = None
        self._lock = threading.Lock()
        # (partition, region, account) of the KEK: a wrapped key naming a key elsewhere is refused
        # before KMS is asked (see `_check_version`).
        self._home: tuple[str, str, str] | None = _home_of(key_id) if key_id.startswith("arn:") else None

    @property
    def kek_uri(self) -> str:
        return self._kek_uri

    @property
    def carries_context(self) -> bool:
        return True

    async def generate_data_key(self, context: Context) -> DataKey:
        response = await self._call(
            "GenerateDataKey",
            lambda kms: kms.generate_data_key(
                KeyId=self._key_id, KeySpec="AES_256", EncryptionContext=dict(context)
            ),
        )
        plaintext = bytes(response["Plaintext"])
        if len(plaintext) != DATA_KEY_BYTES:
            raise KmsRefusedError("aws-kms GenerateDataKey returned a key of unexpected size")
        return DataKey(plaintext, self._wrapped(response))

    async def wrap(self, plaintext: bytes, context: Context) -> WrappedKey:
        response = await self._call(
            "Encrypt",
            lambda kms: kms.encrypt(KeyId=self._key_id, Plaintext=plaintext, EncryptionContext=dict(context)),
        )
        return self._wrapped(response)

    async def unwrap(self, wrapped: WrappedKey, context: Context) -> bytes:
        if wrapped.kek_uri != self._kek_uri:
            raise KmsRefusedError(f"aws-kms: wrapped key belongs to another KEK ({wrapped.kek_uri})")
        await self._check_version(wrapped.kek_version)
        # KeyId pins Decrypt to the key that wrapped it: a blob under some other key fails.
        response = await self._call(
            "Decrypt",
            lambda kms: kms.decrypt(
                KeyId=wrapped.kek_version,
                CiphertextBlob=wrapped.ciphertext,
                EncryptionContext=dict(context),
                EncryptionAlgorithm="SYMMETRIC_DEFAULT",
            ),
        )
        return bytes(response["Plaintext"])

    async def current_version(self) -> str:
        response = await self._call("DescribeKey", lambda kms: kms.describe_key(KeyId=self._key_id))
        arn = str(response["KeyMetadata"]["Arn"])
        self._home = self._home or _home_of(arn)
        return arn

    async def aclose(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None:
            await asyncio.to_thread(client.close)

    def _wrapped(self, response: dict[str, Any]) -> WrappedKey:
        arn = str(response["KeyId"])
        self._home = self._home or _home_of(arn)
        return WrappedKey(self._kek_uri, arn, bytes(response["CiphertextBlob"]))

    async def _check_version(self, kek_version: str) -> None:
        """Refuse a wrapped key that names a key outside the KEK's account and region.

        The wrapped key sits in a file header that is authenticated only by the data key it
        yields; a blob wrapped under a key an attacker controls (and lets us use) would otherwise
        hand us the attacker's data key. Rotation re-points an alias within one account, so the
        check never refuses a key the gateway itself wrapped.
        """
        if self._home is None:
            await self.current_version()
        if self._home is None or _home_of(kek_version) != self._home or ":key/" not in kek_version:
            raise KmsRefusedError("aws-kms: wrapped key names a KMS key outside the KEK's account/region")

    def _kms(self) -> Any:
        with self._lock:
            if self._client is None:
                self._client = self._make_client()
            return self._client

    def _make_client(self) -> Any:
        aws = self._settings.aws
        timeout = self._settings.timeout_seconds
        config = Config(
            connect_timeout=min(timeout, 5.0),
            read_timeout=timeout,
            retries={"max_attempts": 2, "mode": "standard"},
        )
        kwargs: dict[str, Any] = {"config": config}
        if aws.region:
            kwargs["region_name"] = aws.region
        if aws.endpoint_url:
            kwargs["endpoint_url"] = aws.endpoint_url
        if aws.access_key_id and aws.secret_access_key:
            kwargs["aws_access_key_id"] = aws.access_key_id.get_secret_value()
            kwargs["aws_secret_access_key"] = aws.secret_access_key.get_secret_value()
        # A session of our own: boto3's default session is shared module state.
        try:
            return boto3.session.Session().client("kms", **kwargs)
        except BotoCoreError as err:  # e.g. no region configured anywhere
            raise KmsRefusedError(f"aws-kms: cannot configure the client: {type(err).__name__}") from err

    async def _call(self, operation: str, call: Callable[[Any], T]) -> T:
        # Building the client loads botocore's service model (local work, often longer than a
        # KMS round trip): done outside the timeout, once.
        kms = self._client if self._client is not None else await asyncio.to_thread(self._kms)
        try:
            async with asyncio.timeout(self._settings.timeout_seconds):
                return await asyncio.to_thread(call, kms)
        except TimeoutError as err:
            raise KmsUnavailableError(f"aws-kms {operation} timed out") from err
        except ClientError as err:
            code = str(err.response.get("Error", {}).get("Code", "Unknown"))
            status = err.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
            if code in _REFUSED_CODES:
                raise KmsRefusedError(f"aws-kms {operation} refused: {code}") from err
            raise KmsUnavailableError(f"aws-kms {operation} failed: {code} (HTTP {status})") from err
        except _TRANSPORT_ERRORS as err:  # unreachable endpoint, connect/read timeout, ...
            raise KmsUnavailableError(f"aws-kms {operation} failed: {type(err).__name__}") from err
        except BotoCoreError as err:  # no credentials or region, invalid parameters: will not heal
            raise KmsRefusedError(f"aws-kms {operation} failed: {type(err).__name__}") from err


def _home_of(arn: str) -> tuple[str, str, str] | None:
    """(partition, region, account) of `arn:PARTITION:kms:REGION:ACCOUNT:key/ID` (or alias/NAME)."""
    parts = arn.split(":", 5)
    if len(parts) != 6 or parts[0] != "arn" or parts[2] != "kms":
        return None
    return parts[1], parts[3], parts[4]
