"""The credential vendor against a real STS (moto, signatures checked): one AssumeRole per location
and level while cached, concurrent requests share one call, the cache is bounded, refusals are
CredentialVendingError (503) without the secret."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator

import pytest
from pydantic import SecretStr

from cedarberg.gateway.config.storage import S3Settings, VendingSettings
from cedarberg.gateway.storage.s3_scope import S3Scope
from cedarberg.gateway.storage.vending import CredentialVendingError, CredentialVendor
from tests.support.s3 import ROLE_ARN, MotoS3Server, moto_s3_server


@pytest.fixture(scope="module")
def s3() -> Iterator[MotoS3Server]:
    with moto_s3_server() as server:
        yield server


def vendor(s3: MotoS3Server, max_cached: int = 8, secret: str = "") -> CredentialVendor:
    settings = S3Settings(
        endpoint=s3.url,
        access_key_id=s3.access_key_id,
        secret_access_key=SecretStr(secret or s3.secret_access_key),
        path_style_access=True,
    )
    assert s3.sts is not None
    return CredentialVendor(
        settings,
        VendingSettings(role_arn=ROLE_ARN, duration_seconds=900, sts_endpoint=s3.sts.url),
        max_cached,
    )


def test_cached_per_location_and_level_and_bounded(s3: MotoS3Server) -> None:
    one, two = S3Scope("cedarberg-lake", "wh/one"), S3Scope("cedarberg-lake", "wh/two")

    async def run() -> None:
        vend = vendor(s3, max_cached=2)
        calls = s3.assume_role_count()
        first = await vend.vend(one, False)
        assert await vend.vend(one, False) == first
        assert s3.assume_role_count() == calls + 1
        writer = await vend.vend(one, True)
        assert writer.access_key_id != first.access_key_id
        assert s3.assume_role_count() == calls + 2
        await vend.vend(two, False)  # a third entry: (one, read) is the least recently used
        assert await vend.vend(one, True) == writer
        assert (await vend.vend(one, False)).access_key_id != first.access_key_id
        assert s3.assume_role_count() == calls + 4
        expires = first.expires_at_ms / 1000
        assert time.time() + 800 < expires < time.time() + 901
        assert first.refresh_after < expires - 400
        assert first.secret_access_key not in repr(first)
        config = vend.config(first)
        assert config["s3.access-key-id"] == first.access_key_id
        assert config["s3.session-token-expires-at-ms"] == str(first.expires_at_ms)
        policy = json.loads(s3.assumed_role(writer.access_key_id)["Policy"])
        assert policy["Statement"][-1]["Resource"] == ["arn:aws:s3:::cedarberg-lake/wh/one/*"]

    asyncio.run(run())


def test_concurrent_requests_share_one_call(s3: MotoS3Server) -> None:
    scope = S3Scope("cedarberg-lake", "wh/shared")

    async def run() -> None:
        vend = vendor(s3)
        calls = s3.assume_role_count()
        got = await asyncio.gather(*(vend.vend(scope, True) for _ in range(5)))
        assert len({credentials.access_key_id for credentials in got}) == 1
        assert s3.assume_role_count() == calls + 1

    asyncio.run(run())


def test_sts_refusal_is_a_vending_error(s3: MotoS3Server) -> None:
    async def run() -> None:
        vend = vendor(s3, secret="not-the-secret")
        with pytest.raises(CredentialVendingError, match=r"STS refused \(SignatureDoesNotMatch\)"):
            await vend.vend(S3Scope("cedarberg-lake", "wh/x"), False)

    asyncio.run(run())
