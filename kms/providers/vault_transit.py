"""`vault-transit://HOST:PORT/MOUNT/KEY` — HashiCorp Vault / OpenBao transit, over its HTTP API.

The last path segment is the transit key, everything before it the mount (which may be nested,
e.g. `vault-transit://vault:8200/team/transit/tables`).

Context binding: the key must be an `aes256-gcm96` (or `chacha20-poly1305`) transit key, and the
canonical context bytes go to Vault as `associated_data` on datakey, encrypt and decrypt. Vault
uses them as the AEAD's associated data, so it refuses (HTTP 400, "message authentication
failed") to decrypt under any other context — checked against the real OpenBao server in
tests/kms/test_providers.py. This needs no special key settings, unlike the alternative of a
`derived` key with `context`, which would also work but makes every key operation require it.

Errors: 5xx (503 is a sealed Vault), 429 and connection failures are KmsUnavailableError;
other 4xx are KmsRefusedError. Messages never include the token.
"""

from __future__ import annotations

import asyncio
import base64
import os
import re
import ssl
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit

import aiohttp
import orjson

from cedarberg.kms.errors import KmsError, KmsRefusedError, KmsUnavailableError
from cedarberg.kms.keys import DATA_KEY_BYTES, Context, DataKey, WrappedKey, context_bytes
from cedarberg.kms.settings import KmsSettings

SCHEME = "vault-transit"
DEFAULT_PORT = 8200
_SEGMENT = re.compile(r"^[A-Za-z0-9._-]+$")
_CIPHERTEXT = re.compile(r"^vault:v([1-9][0-9]{0,9}):[A-Za-z0-9+/=]+$")
_MAX_RESPONSE_BYTES = 1 << 20


def open_provider(kek_uri: str, settings: KmsSettings, local_key_dir: Path) -> VaultTransitProvider:
    """Build the provider; no network I/O. Raises KmsError for a malformed URI."""
    del local_key_dir  # only the local provider keeps keys on disk
    parts = urlsplit(kek_uri)
    if parts.scheme != SCHEME or not parts.hostname or parts.query or parts.fragment or parts.username:
        raise KmsError(f"expected vault-transit://HOST:PORT/MOUNT/KEY, got {kek_uri!r}")
    try:
        port = parts.port or DEFAULT_PORT
    except ValueError as err:
        raise KmsError(f"bad port in {kek_uri!r}") from err
    segments = parts.path.strip("/").split("/")
    if len(segments) < 2 or not all(_SEGMENT.match(s) and s not in {".", ".."} for s in segments):
        raise KmsError(f"expected vault-transit://HOST:PORT/MOUNT/KEY, got {kek_uri!r}")
    host = f"[{parts.hostname}]" if ":" in parts.hostname else parts.hostname
    base = f"{'https' if settings.vault.tls else 'http'}://{host}:{port}/v1/"
    mount, key = "/".join(segments[:-1]), segments[-1]
    return VaultTransitProvider(kek_uri, base + mount, key, settings)


class VaultTransitProvider:
    """KeyProvider over Vault transit. One aiohttp session, created on first use."""

    def __init__(self, kek_uri: str, mount_url: str, key: str, settings: KmsSettings) -> None:
        self._kek_uri = kek_uri
        self._mount_url = mount_url
        self._key = quote(key, safe="")
        self._settings = settings
        self._session: aiohttp.ClientSession | None = None
        self._token: str | None = None

    @property
    def kek_uri(self) -> str:
        return self._kek_uri

    @property
    def carries_context(self) -> bool:
        return True

    async def generate_data_key(self, context: Context) -> DataKey:
        data = await self._request("datakey", "POST", f"datakey/plaintext/{self._key}", _aad(context))
        plaintext = _b64(data.get("plaintext"), "datakey")
        if len(plaintext) != DATA_KEY_BYTES:
            raise KmsRefusedError("vault-transit datakey returned a key of unexpected size")
        return DataKey(plaintext, self._wrapped(data, "datakey"))

    async def wrap(self, plaintext: bytes, context: Context) -> WrappedKey:
        body = {"plaintext": base64.b64encode(plaintext).decode(), **_aad(context)}
        data = await self._request("encrypt", "POST", f"encrypt/{self._key}", body)
        return self._wrapped(data, "encrypt")

    async def unwrap(self, wrapped: WrappedKey, context: Context) -> bytes:
        if wrapped.kek_uri != self._kek_uri:
            raise KmsRefusedError(f"vault-transit: wrapped key belongs to another KEK ({wrapped.kek_uri})")
        ciphertext = wrapped.ciphertext.decode("ascii", errors="replace")
        match = _CIPHERTEXT.match(ciphertext)
        if match is None or match.group(1) != wrapped.kek_version:
            raise KmsRefusedError("vault-transit: wrapped key is not a transit ciphertext of its version")
        body = {"ciphertext": ciphertext, **_aad(context)}
        data = await self._request("decrypt", "POST", f"decrypt/{self._key}", body)
        return _b64(data.get("plaintext"), "decrypt")

    async def current_version(self) -> str:
        data = await self._request("read key", "GET", f"keys/{self._key}", None)
        version = data.get("latest_version")
        if not isinstance(version, int) or version < 1:
            raise KmsUnavailableError("vault-transit read key: no latest_version in the answer")
        return str(version)

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await session.close()

    def _wrapped(self, data: dict[str, Any], operation: str) -> WrappedKey:
        ciphertext = data.get("ciphertext")
        match = _CIPHERTEXT.match(ciphertext) if isinstance(ciphertext, str) else None
        if match is None:
            raise KmsUnavailableError(f"vault-transit {operation}: malformed ciphertext in the answer")
        return WrappedKey(self._kek_uri, match.group(1), match.group(0).encode("ascii"))

    async def _request(
        self, operation: str, method: str, path: str, body: dict[str, str] | None
    ) -> dict[str, Any]:
        """`data` of Vault's JSON answer. Retries once with a re-read token file after a 403."""
        for attempt in range(2):
            status, answer = await self._send(operation, method, path, body, reload_token=attempt > 0)
            if status == 403 and attempt == 0 and self._settings.vault.token_file is not None:
                continue
            break
        if status >= 500 or status == 429:
            raise KmsUnavailableError(f"vault-transit {operation} failed: HTTP {status}{_errors(answer)}")
        if status >= 300:
            raise KmsRefusedError(f"vault-transit {operation} refused: HTTP {status}{_errors(answer)}")
        data = answer.get("data") if isinstance(answer, dict) else None
        if not isinstance(data, dict):
            raise KmsUnavailableError(f"vault-transit {operation}: answer without data")
        return data

    async def _send(
        self, operation: str, method: str, path: str, body: dict[str, str] | None, reload_token: bool
    ) -> tuple[int, Any]:
        headers = {"X-Vault-Token": self._current_token(reload_token), "X-Vault-Request": "true"}
        if self._settings.vault.namespace:
            headers["X-Vault-Namespace"] = self._settings.vault.namespace
        try:
            async with asyncio.timeout(self._settings.timeout_seconds):
                session = self._open_session()
                async with session.request(
                    method, f"{self._mount_url}/{path}", json=body, headers=headers, allow_redirects=False
                ) as response:
                    raw = await response.content.read(_MAX_RESPONSE_BYTES)
                    try:
                        answer: Any = orjson.loads(raw) if raw else {}
                    except ValueError:
                        answer = {}
                    return response.status, answer
        except TimeoutError as err:
            raise KmsUnavailableError(f"vault-transit {operation} timed out") from err
        except aiohttp.ClientError as err:
            raise KmsUnavailableError(f"vault-transit {operation} failed: {type(err).__name__}") from err

    def _open_session(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            ssl_context: ssl.SSLContext | bool = False
            if self._settings.vault.tls:
                ca_file = self._settings.vault.ca_file
                ssl_context = ssl.create_default_context(cafile=str(ca_file) if ca_file else None)
            timeout = aiohttp.ClientTimeout(total=self._settings.timeout_seconds)
            self._session = aiohttp.ClientSession(
                timeout=timeout,
                connector=aiohttp.TCPConnector(ssl=ssl_context),
                trust_env=False,  # never send the token through a proxy from the environment
            )
        return self._session

    def _current_token(self, reload: bool) -> str:
        vault = self._settings.vault
        if vault.token is not None:
            return vault.token.get_secret_value()
        if self._token is None or reload:
            if vault.token_file is not None:
                try:
                    self._token = vault.token_file.read_text().strip()
                except OSError as err:
                    raise KmsRefusedError(f"vault-transit: cannot read token file: {err.strerror}") from err
            else:
                self._token = os.environ.get("VAULT_TOKEN", "").strip()
        if not self._token:
            raise KmsRefusedError("vault-transit: no token (set kms.vault.token, token_file or VAULT_TOKEN)")
        return self._token


def _aad(context: Context) -> dict[str, str]:
    # Always sent, even for an empty context ("{}"), so a key wrapped with a context can never be
    # unwrapped by simply leaving the context out.
    return {"associated_data": base64.b64encode(context_bytes(context)).decode()}


def _b64(value: object, operation: str) -> bytes:
    if not isinstance(value, str):
        raise KmsUnavailableError(f"vault-transit {operation}: no plaintext in the answer")
    try:
        return base64.b64decode(value, validate=True)
    except ValueError as err:
        raise KmsUnavailableError(f"vault-transit {operation}: malformed plaintext in the answer") from err


def _errors(answer: Any) -> str:
    errors = answer.get("errors") if isinstance(answer, dict) else None
    if not isinstance(errors, list) or not errors:
        return ""
    return ": " + "; ".join(str(e) for e in errors)[:200]
