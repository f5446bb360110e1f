"""The local:// provider against real key files in a temporary directory."""

from __future__ import annotations

import base64
import os
import stat
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import orjson
import pytest

from cedarberg.kms.errors import KmsRefusedError
from cedarberg.kms.keys import WrappedKey
from cedarberg.kms.providers.local import LocalKeyProvider, add_key_version, open_provider
from cedarberg.kms.settings import KmsSettings

URI = "local://default"
CONTEXT = {"warehouse": "wh", "kind": "table", "object": "0b1c2d3e-0000-4000-8000-000000000001"}


@pytest.fixture
def key_dir(tmp_path: Path) -> Path:
    return tmp_path / "data" / "kms"


def _open(key_dir: Path, uri: str = URI) -> LocalKeyProvider:
    return open_provider(uri, KmsSettings(kek=uri), key_dir)


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


async def test_key_file_is_created_private_and_well_formed(key_dir: Path) -> None:
    provider = _open(key_dir)
    path = key_dir / "default.key"
    assert provider.key_file == path
    assert _mode(key_dir) == 0o700
    assert _mode(path) == 0o600
    assert path.stat().st_uid == os.geteuid()
    assert sorted(os.listdir(key_dir)) == ["default.key"]  # no temporary file left behind
    doc = orjson.loads(path.read_bytes())
    assert doc["format"] == 1
    assert doc["current"] == "1"
    assert len(base64.b64decode(doc["versions"]["1"], validate=True)) == 32
    assert await provider.current_version() == "1"
    assert "versions" not in repr(provider)


async def test_second_open_reuses_the_key(key_dir: Path) -> None:
    first = _open(key_dir)
    data_key = await first.generate_data_key(CONTEXT)
    before = (key_dir / "default.key").read_bytes()
    second = _open(key_dir)
    assert (key_dir / "default.key").read_bytes() == before
    assert await second.unwrap(data_key.wrapped, CONTEXT) == data_key.plaintext


def test_concurrent_first_opens_agree_on_one_key(key_dir: Path) -> None:
    with ThreadPoolExecutor(max_workers=8) as pool:
        providers = list(pool.map(lambda _: _open(key_dir), range(8)))
    contents = {p.key_file.read_bytes() for p in providers}
    assert len(contents) == 1
    assert sorted(os.listdir(key_dir)) == ["default.key"]


def test_a_kek_that_is_not_configured_is_never_created(key_dir: Path) -> None:
    _open(key_dir)  # the configured one exists
    with pytest.raises(KmsRefusedError, match="does not exist"):
        open_provider("local://other", KmsSettings(kek=URI), key_dir)
    assert not (key_dir / "other.key").exists()


@pytest.mark.parametrize(
    "uri", ["local://", "local://a/b", "local://../default", "local://" + "a" * 65, "local:/x", "aws-kms://x"]
)
def test_malformed_uri_is_refused(key_dir: Path, uri: str) -> None:
    with pytest.raises(KmsRefusedError, match="local://NAME"):
        open_provider(uri, KmsSettings(kek=uri), key_dir)
    assert not key_dir.exists()


async def test_round_trip_and_wrap_of_an_existing_key(key_dir: Path) -> None:
    provider = _open(key_dir)
    data_key = await provider.generate_data_key(CONTEXT)
    assert data_key.wrapped.kek_uri == URI
    assert data_key.wrapped.kek_version == "1"
    assert len(data_key.wrapped.ciphertext) == 12 + 32 + 16
    assert await provider.unwrap(data_key.wrapped, CONTEXT) == data_key.plaintext
    rewrapped = await provider.wrap(data_key.plaintext, CONTEXT)
    assert rewrapped.ciphertext != data_key.wrapped.ciphertext  # fresh nonce
    assert await provider.unwrap(rewrapped, CONTEXT) == data_key.plaintext
    # the same plaintext context in another key order is the same context
    assert await provider.unwrap(rewrapped, dict(reversed(CONTEXT.items()))) == data_key.plaintext


@pytest.mark.parametrize(
    "other",
    [
        {**CONTEXT, "object": "0b1c2d3e-0000-4000-8000-000000000002"},
        {**CONTEXT, "kind": "view"},
        {k: v for k, v in CONTEXT.items() if k != "warehouse"},
        {},
    ],
)
async def test_wrong_context_is_refused(key_dir: Path, other: dict[str, str]) -> None:
    provider = _open(key_dir)
    data_key = await provider.generate_data_key(CONTEXT)
    with pytest.raises(KmsRefusedError, match="wrong context or tampered"):
        await provider.unwrap(data_key.wrapped, other)


async def test_tampered_wrapped_key_is_refused(key_dir: Path) -> None:
    provider = _open(key_dir)
    wrapped = (await provider.generate_data_key(CONTEXT)).wrapped
    for index in range(len(wrapped.ciphertext)):
        blob = bytearray(wrapped.ciphertext)
        blob[index] ^= 0x01
        with pytest.raises(KmsRefusedError, match="wrong context or tampered"):
            await provider.unwrap(WrappedKey(URI, "1", bytes(blob)), CONTEXT)
    with pytest.raises(KmsRefusedError, match="malformed"):
        await provider.unwrap(WrappedKey(URI, "1", wrapped.ciphertext[:-1]), CONTEXT)
    with pytest.raises(KmsRefusedError, match="another KEK"):
        await provider.unwrap(WrappedKey("local://other", "1", wrapped.ciphertext), CONTEXT)


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o620, 0o602, 0o610, 0o644])
def test_key_file_accessible_to_others_is_refused(key_dir: Path, mode: int) -> None:
    _open(key_dir)
    (key_dir / "default.key").chmod(mode)
    with pytest.raises(KmsRefusedError, match="must be 0600"):
        _open(key_dir)


def test_key_file_of_another_user_is_refused(key_dir: Path) -> None:
    _open(key_dir)
    key_file = key_dir / "default.key"
    if os.geteuid() == 0:
        os.chown(key_file, 65534, 65534)  # really owned by "nobody" now
    else:  # without root the file cannot change owner: the gateway then runs as someone else
        pytest.fail("this test needs root to give the key file to another user")
    with pytest.raises(KmsRefusedError, match="not owned"):
        _open(key_dir)


async def test_running_provider_refuses_a_key_file_made_readable(key_dir: Path) -> None:
    provider = _open(key_dir)
    (key_dir / "default.key").chmod(0o644)
    with pytest.raises(KmsRefusedError, match="must be 0600"):
        await provider.current_version()


@pytest.mark.parametrize(
    "content",
    [
        b"",
        b"not json",
        b"[]",
        b'{"format": 2, "current": "1", "versions": {"1": "' + base64.b64encode(bytes(32)) + b'"}}',
        b'{"format": 1, "current": "2", "versions": {"1": "' + base64.b64encode(bytes(32)) + b'"}}',
        b'{"format": 1, "current": "1", "versions": {"1": "' + base64.b64encode(bytes(31)) + b'"}}',
        b'{"format": 1, "current": "01", "versions": {"01": "' + base64.b64encode(bytes(32)) + b'"}}',
        b'{"format": 1, "current": "1", "versions": {"1": "not base64!"}}',
    ],
)
def test_malformed_key_file_is_refused(key_dir: Path, content: bytes) -> None:
    key_dir.mkdir(parents=True, mode=0o700)
    path = key_dir / "default.key"
    path.write_bytes(content)
    path.chmod(0o600)
    with pytest.raises(KmsRefusedError, match="malformed"):
        _open(key_dir)
    assert path.read_bytes() == content  # never "repaired" by overwriting


async def test_add_key_version_rotates_and_keeps_old_versions(key_dir: Path) -> None:
    running = _open(key_dir)
    old = await running.generate_data_key(CONTEXT)
    path = key_dir / "default.key"

    assert add_key_version(path) == "2"
    assert _mode(path) == 0o600
    assert sorted(os.listdir(key_dir)) == ["default.key"]
    assert orjson.loads(path.read_bytes())["current"] == "2"

    # the running instance sees the new version without being reopened
    assert await running.current_version() == "2"
    new = await running.generate_data_key(CONTEXT)
    assert new.wrapped.kek_version == "2"
    assert await running.unwrap(old.wrapped, CONTEXT) == old.plaintext
    assert await running.unwrap(new.wrapped, CONTEXT) == new.plaintext
    assert (await running.wrap(old.plaintext, CONTEXT)).kek_version == "2"

    assert add_key_version(path) == "3"
    fresh = _open(key_dir)
    assert await fresh.current_version() == "3"
    assert await fresh.unwrap(old.wrapped, CONTEXT) == old.plaintext
    assert await fresh.unwrap(new.wrapped, CONTEXT) == new.plaintext


async def test_unwrap_of_an_unknown_version_rereads_the_file_once(key_dir: Path) -> None:
    running = _open(key_dir)
    add_key_version(running.key_file)
    other = _open(key_dir)
    wrapped_v2 = (await other.generate_data_key(CONTEXT)).wrapped
    assert wrapped_v2.kek_version == "2"

    # `running` has only read version 1: it re-reads the file when asked for version 2
    assert len(await running.unwrap(wrapped_v2, CONTEXT)) == 32
    assert running.stats()["reloads"] == 1

    unknown = WrappedKey(URI, "9", wrapped_v2.ciphertext)
    with pytest.raises(KmsRefusedError, match="no version '9'"):
        await running.unwrap(unknown, CONTEXT)
    assert running.stats()["reloads"] == 1  # the file did not change: not parsed again


def test_add_key_version_refuses_a_readable_key_file(key_dir: Path) -> None:
    _open(key_dir)
    path = key_dir / "default.key"
    path.chmod(0o644)
    before = path.read_bytes()
    with pytest.raises(KmsRefusedError, match="must be 0600"):
        add_key_version(path)
    assert path.read_bytes() == before


def test_add_key_version_to_a_missing_file_is_refused(key_dir: Path) -> None:
    key_dir.mkdir(parents=True)
    with pytest.raises(KmsRefusedError, match="does not exist"):
        add_key_version(key_dir / "default.key")
    assert os.listdir(key_dir) == []
