"""One contract for every KMS provider, run against real servers: OpenBao (Vault transit), moto
(AWS KMS), the Cloud KMS gRPC fake and the Key Vault HTTPS fake (both spoken to by the real SDKs),
and the local key file.

Providers are opened through `kms.registry`, from the `[kms]` section each server hands out.
"""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import os
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from cedarberg.kms import registry
from cedarberg.kms.errors import KmsError, KmsRefusedError, KmsUnavailableError, UnsupportedContextError
from cedarberg.kms.keys import Context, WrappedKey
from cedarberg.kms.provider import KeyProvider
from cedarberg.kms.settings import KmsSettings
from tests.support.kms_servers import (
    AzureKeyVaultFake,
    GcpKmsFake,
    MotoKmsServer,
    OpenBaoServer,
    azure_kv_fake,
    crc32c_reference,
    gcp_kms_fake,
    moto_kms_server,
    openbao_server,
    unresponsive_port,
)
from tests.support.ports import free_port
from tests.support.tls import make_pki

# Seconds per KMS call in these tests: a TLS handshake with a fake on a loaded machine can take
# over a second.
TIMEOUT = 3.0

# -- servers (one each per module) ---------------------------------------------------------------


@pytest.fixture(scope="module")
def bao() -> Iterator[OpenBaoServer]:
    with openbao_server() as server:
        yield server


@pytest.fixture(scope="module")
def moto() -> Iterator[MotoKmsServer]:
    with moto_kms_server() as server:
        yield server


@pytest.fixture(scope="module")
def gcp() -> Iterator[GcpKmsFake]:
    with gcp_kms_fake() as fake:
        yield fake


@pytest.fixture(scope="module")
def azure(tmp_path_factory: pytest.TempPathFactory) -> Iterator[AzureKeyVaultFake]:
    with azure_kv_fake(make_pki(tmp_path_factory.mktemp("azure-pki"))) as fake:
        yield fake


@dataclasses.dataclass
class Target:
    """One KEK on one server, as the gateway would be configured for it."""

    name: str
    kek_uri: str
    config: dict[str, Any]
    rotate: Callable[[], object]
    key_dir: Path
    server: Any = None
    opened: list[KeyProvider] = dataclasses.field(default_factory=list)

    @property
    def carries_context(self) -> bool:
        return not self.name.startswith("azure")

    def open(self, kek_uri: str | None = None, config: dict[str, Any] | None = None) -> KeyProvider:
        uri = kek_uri or self.kek_uri
        settings = KmsSettings.model_validate(
            {**(config or self.config), "kek": uri, "timeout_seconds": TIMEOUT}
        )
        provider = registry.open_provider(uri, settings, self.key_dir)
        self.opened.append(provider)
        return provider


REMOTE = ["vault", "aws", "gcp", "azure-rsa", "azure-oct"]


def _local_target(tmp_path: Path) -> Target:
    from cedarberg.kms.providers import local

    uri = "local://contract"
    key_dir = tmp_path / "keys"
    target = Target("local", uri, {"kek": uri}, lambda: None, key_dir)
    target.open()  # creates the key file for the configured KEK
    target.rotate = lambda: local.add_key_version(local.key_file_for(uri, key_dir))
    return target


@pytest.fixture
async def target(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Target]:
    name: str = request.param
    key_dir = tmp_path / "keys"
    if name == "local":
        made = _local_target(tmp_path)
    elif name == "vault":
        bao: OpenBaoServer = request.getfixturevalue("bao")
        made = Target(name, bao.kek_uri, bao.kms_config, bao.rotate_key, key_dir, bao)
    elif name == "aws":
        moto: MotoKmsServer = request.getfixturevalue("moto")
        made = Target(name, moto.kek_uri, moto.kms_config, moto.retarget_alias, key_dir, moto)
    elif name == "gcp":
        gcp: GcpKmsFake = request.getfixturevalue("gcp")
        made = Target(name, gcp.kek_uri, gcp.kms_config, gcp.rotate, key_dir, gcp)
    else:
        azure: AzureKeyVaultFake = request.getfixturevalue("azure")
        key = azure.RSA_KEY if name == "azure-rsa" else azure.OCT_KEY
        uri = azure.kek_uri_for(key)
        made = Target(name, uri, azure.config_for(uri), lambda: azure.rotate(key), key_dir, azure)
    try:
        yield made
    finally:
        for provider in made.opened:
            await provider.aclose()


def _contract_kinds() -> list[str]:
    try:
        import cedarberg.kms.providers.local  # noqa: F401
    except ImportError:
        return REMOTE
    return ["local", *REMOTE]


ALL = pytest.mark.parametrize("target", _contract_kinds(), indirect=True)
REMOTE_ONLY = pytest.mark.parametrize("target", REMOTE, indirect=True)


def context_for(target: Target) -> Context:
    if not target.carries_context:
        return {}
    return {"warehouse": "wh", "kind": "table", "object": str(uuid.uuid4())}


def tampered(wrapped: WrappedKey) -> WrappedKey:
    """The same wrapped key with one bit of the encrypted payload flipped (inside Vault's
    base64 payload, so the blob stays well-formed and the KMS itself must notice)."""
    blob = wrapped.ciphertext
    if blob.startswith(b"vault:"):
        prefix, _, payload = blob.rpartition(b":")
        raw = bytearray(base64.b64decode(payload))
        raw[len(raw) // 2] ^= 0x01
        return dataclasses.replace(wrapped, ciphertext=prefix + b":" + base64.b64encode(bytes(raw)))
    raw = bytearray(blob)
    raw[len(raw) // 2] ^= 0x01
    return dataclasses.replace(wrapped, ciphertext=bytes(raw))


# -- the contract ---------------------------------------------------------------------------------


@ALL
async def test_data_key_round_trips_through_a_second_fresh_provider(target: Target) -> None:
    context = context_for(target)
    first = target.open()
    data_key = await first.generate_data_key(context)

    assert len(data_key.plaintext) == 32
    assert data_key.wrapped.kek_uri == target.kek_uri
    assert data_key.wrapped.kek_version == await first.current_version()
    assert data_key.plaintext not in data_key.wrapped.ciphertext
    # A fresh provider shares nothing with the first but the KMS: no local-only wrapping.
    assert await target.open().unwrap(data_key.wrapped, context) == data_key.plaintext
    assert await first.unwrap(data_key.wrapped, context) == data_key.plaintext


@ALL
async def test_two_data_keys_differ(target: Target) -> None:
    provider = target.open()
    context = context_for(target)
    one, two = await provider.generate_data_key(context), await provider.generate_data_key(context)
    assert one.plaintext != two.plaintext
    assert one.wrapped.ciphertext != two.wrapped.ciphertext


@ALL
async def test_wrap_of_an_existing_key(target: Target) -> None:
    context = context_for(target)
    plaintext = os.urandom(32)
    wrapped = await target.open().wrap(plaintext, context)
    assert wrapped.kek_uri == target.kek_uri
    assert await target.open().unwrap(wrapped, context) == plaintext


@ALL
async def test_tampered_wrapped_key_is_refused(target: Target) -> None:
    context = context_for(target)
    provider = target.open()
    data_key = await provider.generate_data_key(context)
    with pytest.raises(KmsRefusedError):
        await provider.unwrap(tampered(data_key.wrapped), context)


@pytest.mark.parametrize("target", [k for k in _contract_kinds() if not k.startswith("azure")], indirect=True)
async def test_wrong_or_missing_context_is_refused_by_the_kms(target: Target) -> None:
    context = context_for(target)
    provider = target.open()
    assert provider.carries_context
    data_key = await provider.generate_data_key(context)
    for other in ({**context, "object": str(uuid.uuid4())}, {**context, "kind": "view"}, {}):
        with pytest.raises(KmsRefusedError):
            await provider.unwrap(data_key.wrapped, other)
    rewrapped = await provider.wrap(data_key.plaintext, context)
    with pytest.raises(KmsRefusedError):
        await target.open().unwrap(rewrapped, {"warehouse": "another"})


@pytest.mark.parametrize("target", ["azure-rsa", "azure-oct"], indirect=True)
async def test_azure_refuses_a_context_it_cannot_carry(target: Target) -> None:
    provider = target.open()
    assert not provider.carries_context
    context = {"warehouse": "wh"}
    with pytest.raises(UnsupportedContextError):
        await provider.generate_data_key(context)
    with pytest.raises(UnsupportedContextError):
        await provider.wrap(os.urandom(32), context)
    data_key = await provider.generate_data_key({})
    with pytest.raises(UnsupportedContextError):
        await provider.unwrap(data_key.wrapped, context)


@ALL
async def test_rotation_moves_new_keys_to_the_new_version_and_old_keys_still_unwrap(target: Target) -> None:
    context = context_for(target)
    provider = target.open()
    before = await provider.current_version()
    old = await provider.generate_data_key(context)
    assert old.wrapped.kek_version == before

    target.rotate()

    after = await provider.current_version()
    assert after != before
    new = await provider.generate_data_key(context)
    assert new.wrapped.kek_version == after
    rewrapped = await provider.wrap(old.plaintext, context)
    assert rewrapped.kek_version == after
    fresh = target.open()
    assert await fresh.unwrap(old.wrapped, context) == old.plaintext
    assert await fresh.unwrap(rewrapped, context) == old.plaintext
    assert await fresh.unwrap(new.wrapped, context) == new.plaintext


# -- a KMS that cannot be reached fails closed, quickly --------------------------------------------


async def _assert_unavailable(target: Target, port: int, wrapped: WrappedKey, context: Context) -> None:
    kek_uri, config = target.server.pointed_at(port)
    provider = target.open(kek_uri, config)
    calls = [
        provider.generate_data_key(context),
        provider.wrap(os.urandom(32), context),
        provider.unwrap(dataclasses.replace(wrapped, kek_uri=kek_uri), context),
        provider.current_version(),
    ]
    started = time.monotonic()
    outcomes = await asyncio.gather(*calls, return_exceptions=True)  # concurrently: a faster test
    assert time.monotonic() - started < TIMEOUT + 1.5
    assert [type(o) for o in outcomes] == [KmsUnavailableError] * len(calls), outcomes


@REMOTE_ONLY
async def test_closed_port_is_unavailable(target: Target) -> None:
    context = context_for(target)
    wrapped = (await target.open().generate_data_key(context)).wrapped
    await _assert_unavailable(target, free_port(), wrapped, context)


@REMOTE_ONLY
async def test_hung_server_is_unavailable_within_the_timeout(target: Target) -> None:
    context = context_for(target)
    wrapped = (await target.open().generate_data_key(context)).wrapped
    with unresponsive_port() as port:
        await _assert_unavailable(target, port, wrapped, context)


@REMOTE_ONLY
async def test_a_missing_key_is_refused(target: Target) -> None:
    missing = target.kek_uri.rsplit("/", 1)[0] + "/missing"
    provider = target.open(missing, {**target.config, "kek": missing})
    for call in (provider.generate_data_key(context_for(target)), provider.current_version()):
        with pytest.raises(KmsRefusedError):
            await call


@pytest.mark.parametrize("target", ["azure-rsa"], indirect=True)
async def test_azure_rejected_token_is_refused(target: Target) -> None:
    config = {**target.config, "azure": {**target.config["azure"], "static_token": "not-the-token"}}
    with pytest.raises(KmsRefusedError, match=r"ClientAuthenticationError|401"):
        await target.open(config=config).generate_data_key({})


@pytest.mark.parametrize("target", ["vault"], indirect=True)
async def test_sealed_vault_is_unavailable_and_recovers_after_unseal(target: Target) -> None:
    bao: OpenBaoServer = target.server
    context = context_for(target)
    provider = target.open()
    data_key = await provider.generate_data_key(context)
    bao.seal()
    try:
        with pytest.raises(KmsUnavailableError, match="503"):
            await provider.unwrap(data_key.wrapped, context)
        with pytest.raises(KmsUnavailableError):
            await provider.generate_data_key(context)
        with pytest.raises(KmsUnavailableError):
            await provider.current_version()
    finally:
        bao.unseal()
    assert await provider.unwrap(data_key.wrapped, context) == data_key.plaintext
    assert len((await provider.generate_data_key(context)).plaintext) == 32


# -- provider-specific guarantees -----------------------------------------------------------------


@pytest.mark.parametrize("target", ["vault"], indirect=True)
async def test_vault_errors_never_show_the_token(target: Target) -> None:
    secret = "s.not-a-valid-token-" + uuid.uuid4().hex
    provider = target.open(config={**target.config, "vault": {"token": secret, "tls": False}})
    with pytest.raises(KmsRefusedError, match="403") as refused:
        await provider.generate_data_key(context_for(target))
    assert secret not in str(refused.value)
    assert secret not in repr(refused.value.__cause__)


@pytest.mark.parametrize("target", ["vault"], indirect=True)
async def test_vault_rereads_the_token_file_after_a_403(target: Target, tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text("stale-token\n")
    provider = target.open(config={**target.config, "vault": {"token_file": str(token_file), "tls": False}})
    with pytest.raises(KmsRefusedError):
        await provider.current_version()
    token_file.write_text(target.server.token + "\n")  # the sidecar renewed it
    assert await provider.current_version()


@pytest.mark.parametrize("target", ["aws"], indirect=True)
async def test_aws_refuses_a_wrapped_key_naming_a_foreign_kms_key(target: Target) -> None:
    context = context_for(target)
    provider = target.open()
    data_key = await provider.generate_data_key(context)
    foreign = dataclasses.replace(
        data_key.wrapped, kek_version=f"arn:aws:kms:us-east-1:999999999999:key/{uuid.uuid4()}"
    )
    with pytest.raises(KmsRefusedError, match="outside"):
        await provider.unwrap(foreign, context)
    wrong_key = dataclasses.replace(data_key.wrapped, kek_version=target.server.retarget_alias())
    with pytest.raises(KmsRefusedError):  # KMS itself: the blob is not under that key
        await provider.unwrap(wrong_key, context)


@pytest.mark.parametrize("target", ["gcp"], indirect=True)
async def test_gcp_checksum_mismatch_is_treated_as_transient(target: Target) -> None:
    fake: GcpKmsFake = target.server
    context = context_for(target)
    provider = target.open()
    data_key = await provider.generate_data_key(context)
    fake.corrupt_checksums = True
    try:
        with pytest.raises(KmsUnavailableError, match="checksum"):
            await provider.generate_data_key(context)
        with pytest.raises(KmsUnavailableError, match="checksum"):
            await provider.unwrap(data_key.wrapped, context)
    finally:
        fake.corrupt_checksums = False
    assert await provider.unwrap(data_key.wrapped, context) == data_key.plaintext


def test_gcp_crc32c_matches_the_reference() -> None:
    from cedarberg.kms.providers.gcp_kms import crc32c

    assert crc32c(b"123456789") == 0xE3069283 == crc32c_reference(b"123456789")
    blob = os.urandom(300)
    assert crc32c(blob) == crc32c_reference(blob)


@pytest.mark.parametrize("target", ["azure-rsa", "azure-oct"], indirect=True)
async def test_azure_wraps_in_the_vault_never_locally(target: Target) -> None:
    fake: AzureKeyVaultFake = target.server
    key = target.kek_uri.rsplit("/", 1)[1]
    provider = target.open()
    before = [r for r in fake.requests if r[0] == "POST"]
    data_key = await provider.generate_data_key({})
    version = fake.latest_version(key)
    posted = [r for r in fake.requests if r[0] == "POST"][len(before) :]
    assert posted == [("POST", f"/keys/{key}/{version}/wrapkey")]
    assert data_key.wrapped.kek_version == version
    assert await target.open().unwrap(data_key.wrapped, {}) == data_key.plaintext


async def test_the_azure_fake_reproduces_the_sdks_local_wrap_hazard(azure: AzureKeyVaultFake) -> None:
    """A plain CryptographyClient on the oct-HSM key wraps locally with a random key (no wrapkey
    request reaches the vault) and the result can never be unwrapped: the hazard the provider's
    remote-only client avoids. If the SDK stops doing this, this test says so."""
    from azure.keyvault.keys.crypto import KeyWrapAlgorithm
    from azure.keyvault.keys.crypto.aio import CryptographyClient

    from cedarberg.kms.providers.azure_kv import StaticTokenCredential

    version = azure.latest_version(azure.OCT_KEY)
    key_id = f"https://127.0.0.1:{azure.port}/keys/{azure.OCT_KEY}/{version}"
    posts = sum(1 for r in azure.requests if r[0] == "POST")
    async with CryptographyClient(
        key_id,
        StaticTokenCredential(azure.token),
        verify_challenge_resource=False,
        connection_verify=str(azure.pki.ca_cert),
    ) as naive:
        result = await naive.wrap_key(KeyWrapAlgorithm.aes_256, os.urandom(32))
    assert sum(1 for r in azure.requests if r[0] == "POST") == posts  # never reached the vault
    uri = azure.kek_uri_for(azure.OCT_KEY)
    settings = KmsSettings.model_validate({**azure.config_for(uri), "timeout_seconds": TIMEOUT})
    provider = registry.open_provider(uri, settings, Path("/nonexistent"))
    try:
        with pytest.raises(KmsRefusedError):
            await provider.unwrap(WrappedKey(uri, version, bytes(result.encrypted_key)), {})
    finally:
        await provider.aclose()


@pytest.mark.parametrize(
    "kek_uri",
    [
        "aws-kms://",
        "vault-transit://127.0.0.1:8200/only-key",
        "vault-transit://127.0.0.1:8200/transit/../key",
        "vault-transit://user@127.0.0.1:8200/transit/key",
        "gcp-kms://projects/p/locations/l/keyRings/r",
        "gcp-kms://projects/p/locations/l/keyRings/r/cryptoKeys/k/cryptoKeyVersions/1",
        "azure-kv://vault.example/secrets/x",
        "azure-kv://vault.example/keys/",
    ],
)
def test_malformed_kek_uris_are_refused_at_construction(kek_uri: str, tmp_path: Path) -> None:
    with pytest.raises(KmsError):
        registry.open_provider(kek_uri, KmsSettings(kek=kek_uri), tmp_path)


def test_gcp_insecure_channel_only_to_loopback(tmp_path: Path) -> None:
    uri = "gcp-kms://projects/p/locations/l/keyRings/r/cryptoKeys/k"
    for endpoint in ("kms.example.com:443", "10.0.0.1:9000", None):
        settings = KmsSettings.model_validate(
            {"kek": uri, "gcp": {"endpoint": endpoint, "insecure_loopback": True}}
        )
        with pytest.raises(KmsError, match="loopback"):
            registry.open_provider(uri, settings, tmp_path)
