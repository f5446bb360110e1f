"""Vended credentials: STS AssumeRole with a session policy confined to one table's location.

Credentials depend only on (table location, read or read-write), not on who asks (Cedar decided
that before), so they are cached per (location, level) and reused until half their lifetime is
gone: an engine always receives at least half of `duration_seconds`. The cache is bounded (least
recently used out). STS calls block, so they run in a worker thread; concurrent requests for the
same entry share one call.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cedarberg.catalog.errors import StorageUnavailableError
from cedarberg.gateway.config.storage import S3Settings, VendingSettings
from cedarberg.gateway.storage.properties import engine_properties
from cedarberg.gateway.storage.s3_scope import S3Scope, session_policy

log = logging.getLogger(__name__)

MAX_CACHED = 1024
SESSION_NAMES = {False: "cedarberg-read", True: "cedarberg-read-write"}


class CredentialVendingError(StorageUnavailableError):
    """STS refused or could not be reached: no credentials (503)."""


@dataclass(frozen=True, slots=True)
class VendedCredentials:
    access_key_id: str
    secret_access_key: str
    session_token: str
    expires_at_ms: int
    refresh_after: float  # time.time() past which the cache issues new ones

    def __repr__(self) -> str:  # never print the secret parts
        return f"VendedCredentials({self.access_key_id}, expires_at_ms={self.expires_at_ms})"


class CredentialVendor:
    """Vends credentials for the tables of one warehouse."""

    def __init__(self, s3: S3Settings | None, vending: VendingSettings, max_cached: int = MAX_CACHED) -> None:
        self._s3 = s3
        self._vending = vending
        self._max_cached = max_cached
        self._cache: OrderedDict[tuple[S3Scope, bool], VendedCredentials] = OrderedDict()
        self._inflight: dict[tuple[S3Scope, bool], asyncio.Future[VendedCredentials]] = {}
        self._client: Any = None

    @property
    def partition(self) -> str:
        return self._vending.role_arn.split(":")[1]

    async def vend(self, scope: S3Scope, write: bool) -> VendedCredentials:
        """Credentials for `scope`, read-only or read-write. Raises CredentialVendingError."""
        key = (scope, write)
        cached = self._cache.get(key)
        if cached is not None and time.time() < cached.refresh_after:
            self._cache.move_to_end(key)
            return cached
        pending = self._inflight.get(key)
        if pending is not None:
            return await asyncio.shield(pending)
        future: asyncio.Future[VendedCredentials] = asyncio.get_running_loop().create_future()
        self._inflight[key] = future
        try:
            fresh = await asyncio.to_thread(self._assume_role, scope, write)
        except asyncio.CancelledError:
            future.cancel()
            raise
        except Exception as err:
            future.set_exception(err)
            future.exception()  # retrieved: waiters re-raise it, nobody logs it twice
            raise
        finally:
            del self._inflight[key]
        future.set_result(fresh)
        self._cache[key] = fresh
        self._cache.move_to_end(key)
        while len(self._cache) > self._max_cached:
            self._cache.popitem(last=False)
        return fresh

    def config(self, credentials: VendedCredentials) -> dict[str, str]:
        """The LoadTableResult / StorageCredential config an engine needs to use `credentials`."""
        return {
            **engine_properties(self._s3),
            "s3.access-key-id": credentials.access_key_id,
            "s3.secret-access-key": credentials.secret_access_key,
            "s3.session-token": credentials.session_token,
            "s3.session-token-expires-at-ms": str(credentials.expires_at_ms),
        }

    # -- STS (worker thread) -------------------------------------------------------------------

    def _sts(self) -> Any:
        if self._client is None:
            import boto3
            from botocore.config import Config

            s3 = self._s3
            keys: Mapping[str, Any] = {}
            if s3 is not None and s3.access_key_id is not None and s3.secret_access_key is not None:
                keys = {
                    "aws_access_key_id": s3.access_key_id,
                    "aws_secret_access_key": s3.secret_access_key.get_secret_value(),
                    "aws_session_token": s3.session_token.get_secret_value() if s3.session_token else None,
                }
            self._client = boto3.session.Session().client(
                "sts",
                region_name=s3.region if s3 is not None else None,
                endpoint_url=self._vending.sts_endpoint or (s3.endpoint if s3 is not None else None),
                config=Config(connect_timeout=5, read_timeout=10, retries={"max_attempts": 2}),
                **keys,
            )
        return self._client

    def _assume_role(self, scope: S3Scope, write: bool) -> VendedCredentials:
        from botocore.exceptions import BotoCoreError, ClientError

        arguments: dict[str, Any] = {
            "RoleArn": self._vending.role_arn,
            "RoleSessionName": SESSION_NAMES[write],
            "Policy": json.dumps(session_policy(scope, write, self.partition), separators=(",", ":")),
            "DurationSeconds": self._vending.duration_seconds,
        }
        if self._vending.external_id is not None:
            arguments["ExternalId"] = self._vending.external_id
        started = time.time()
        try:
            answer = self._sts().assume_role(**arguments)["Credentials"]
        except ClientError as err:
            code = err.response.get("Error", {}).get("Code", "unknown")
            log.warning("STS AssumeRole for %s refused: %s", self._vending.role_arn, code)
            raise CredentialVendingError(f"cannot vend credentials: STS refused ({code})") from None
        except BotoCoreError as err:
            log.warning("STS AssumeRole for %s failed: %s", self._vending.role_arn, type(err).__name__)
            raise CredentialVendingError("cannot vend credentials: STS is unavailable") from None
        expires = answer["Expiration"].timestamp()
        return VendedCredentials(
            access_key_id=answer["AccessKeyId"],
            secret_access_key=answer["SecretAccessKey"],
            session_token=answer["SessionToken"],
            expires_at_ms=int(expires * 1000),
            refresh_after=started + (expires - started) / 2,
        )
