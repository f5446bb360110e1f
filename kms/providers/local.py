"""The `local://NAME` provider: a KEK kept in a key file on the gateway's own disk.

The embedded default, for single-node deployments and development. The key file is
`<local_key_dir>/<NAME>.key` (NAME: `[A-Za-z0-9_-]{1,64}`):

    {"format": 1, "current": "2", "versions": {"1": "<base64 32 bytes>", "2": "..."}}

A data key is wrapped with AES-256-GCM under the current version's key, with the canonical
encryption context as associated data, so a wrapped key copied onto another object is refused:
ciphertext = nonce (12) || encrypted key (32) || tag (16).

Invariants:
- The file is private: it is refused (KmsRefusedError) if any group/other permission bit is set or
  it is not owned by the gateway's user. Whoever can read it can read every table.
- It is created only for the *configured* KEK (`settings.kek`), on first open: mode 0600, in a
  directory created 0700, written to a temporary file, fsynced and linked into place, so a crash
  never leaves a partial key file and two processes starting at once agree on one key. A `local://`
  KEK met only in a wrapped key or a sealed file is never created: a fresh random key could not
  unwrap anything, and a name taken from a file would litter the key directory.
- Versions are only ever added (`add_key_version`, behind `cedarberg kms new-local-version`); the
  file is replaced atomically. A running provider notices (inode/size/mtime/mode/owner changed)
  before it wraps or reports its current version, and re-reads once when asked to unwrap under a
  version it does not know.
- File I/O after construction runs off the event loop.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import fcntl
import os
import re
import secrets
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from pathlib import Path

import orjson
from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from cedarberg.kms.errors import KmsRefusedError
from cedarberg.kms.keys import DATA_KEY_BYTES, Context, DataKey, WrappedKey, context_bytes
from cedarberg.kms.settings import KmsSettings

SCHEME = "local"
FILE_FORMAT = 1
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_VERSION = re.compile(r"[1-9][0-9]{0,8}")
_NONCE_BYTES = 12
_TAG_BYTES = 16
_MAX_FILE_BYTES = 1 << 20
_PRIVATE_MASK = 0o077  # any group/other permission

# identity and state of the file as read: (inode, size, mtime_ns, mode, owner)
_Stamp = tuple[int, int, int, int, int]


@dataclass(frozen=True, slots=True)
class _KeyFile:
    current: str
    versions: Mapping[str, bytes] = field(repr=False)
    stamp: _Stamp


def key_file_for(kek_uri: str, local_key_dir: Path) -> Path:
    """The key file of `local://NAME`. Raises KmsRefusedError for a malformed URI."""
    scheme, sep, name = kek_uri.partition("://")
    if scheme != SCHEME or not sep or not _NAME.fullmatch(name):
        raise KmsRefusedError("a local KEK URI is local://NAME with NAME of 1-64 of [A-Za-z0-9_-]")
    return local_key_dir / f"{name}.key"


def open_provider(kek_uri: str, settings: KmsSettings, local_key_dir: Path) -> LocalKeyProvider:
    """Open (and, for the configured KEK, create on first use) the key file of `kek_uri`.
    Raises KmsRefusedError if the file is missing, malformed, or not private."""
    path = key_file_for(kek_uri, local_key_dir)
    if kek_uri == settings.kek and not path.exists():
        _create_key_file(path)
    return LocalKeyProvider(kek_uri, path)


def add_key_version(key_file: Path) -> str:
    """Add a new random KEK version to `key_file` and make it current; returns its name. Existing
    versions are kept (keys wrapped under them must stay readable until rotation rewraps them)."""
    with _directory_lock(key_file.parent):
        keys = _read_key_file(key_file)
        version = str(max(int(v) for v in keys.versions) + 1)
        versions = {**keys.versions, version: os.urandom(DATA_KEY_BYTES)}
        _write_atomically(key_file, _encode(version, versions), replace=True)
    return version


class LocalKeyProvider:
    """A KeyProvider over one local key file. `stats()` counts calls by operation."""

    def __init__(self, kek_uri: str, key_file: Path) -> None:
        self._kek_uri = kek_uri
        self._path = key_file
        self._keys = _read_key_file(key_file)
        self._calls: Counter[str] = Counter()

    def __repr__(self) -> str:
        return f"LocalKeyProvider(kek_uri={self._kek_uri!r}, key_file={str(self._path)!r})"

    @property
    def kek_uri(self) -> str:
        return self._kek_uri

    @property
    def carries_context(self) -> bool:
        return True

    @property
    def key_file(self) -> Path:
        return self._path

    def stats(self) -> dict[str, int]:
        """Calls by operation ("generate_data_key", "wrap", "unwrap", "current_version") and
        "reloads" (times the key file was re-read after it changed)."""
        return dict(self._calls)

    async def generate_data_key(self, context: Context) -> DataKey:
        self._calls["generate_data_key"] += 1
        await self._refresh()
        plaintext = os.urandom(DATA_KEY_BYTES)
        return DataKey(plaintext, self._wrap_current(plaintext, context))

    async def wrap(self, plaintext: bytes, context: Context) -> WrappedKey:
        self._calls["wrap"] += 1
        if len(plaintext) != DATA_KEY_BYTES:
            raise KmsRefusedError("local KMS wrap: a data key is 32 bytes")
        await self._refresh()
        return self._wrap_current(plaintext, context)

    async def unwrap(self, wrapped: WrappedKey, context: Context) -> bytes:
        self._calls["unwrap"] += 1
        if wrapped.kek_uri != self._kek_uri:
            raise KmsRefusedError(f"local KMS unwrap: key is wrapped under another KEK, not {self._kek_uri}")
        key = self._keys.versions.get(wrapped.kek_version)
        if key is None:
            await self._refresh()  # a version added since we read the file
            key = self._keys.versions.get(wrapped.kek_version)
        if key is None:
            raise KmsRefusedError(f"local KMS unwrap: {self._kek_uri} has no version {wrapped.kek_version!r}")
        blob = wrapped.ciphertext
        if len(blob) != _NONCE_BYTES + DATA_KEY_BYTES + _TAG_BYTES:
            raise KmsRefusedError("local KMS unwrap: malformed wrapped key")
        try:
            return AESGCM(key).decrypt(blob[:_NONCE_BYTES], blob[_NONCE_BYTES:], context_bytes(context))
        except InvalidTag:
            raise KmsRefusedError(
                "local KMS unwrap: wrapped key does not authenticate (wrong context or tampered)"
            ) from None

    async def current_version(self) -> str:
        self._calls["current_version"] += 1
        await self._refresh()
        return self._keys.current

    async def aclose(self) -> None:
        """Nothing to release: the key file is not held open."""

    def _wrap_current(self, plaintext: bytes, context: Context) -> WrappedKey:
        keys = self._keys
        nonce = os.urandom(_NONCE_BYTES)
        sealed = AESGCM(keys.versions[keys.current]).encrypt(nonce, plaintext, context_bytes(context))
        return WrappedKey(self._kek_uri, keys.current, nonce + sealed)

    async def _refresh(self) -> None:
        before = self._keys
        after = await asyncio.to_thread(_reload_if_changed, self._path, before)
        if after is not before:
            self._calls["reloads"] += 1
            self._keys = after


# -- the key file ---------------------------------------------------------------------------------


def _stamp(st: os.stat_result) -> _Stamp:
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_mode, st.st_uid)


def _reload_if_changed(path: Path, keys: _KeyFile) -> _KeyFile:
    try:
        stamp = _stamp(os.stat(path))
    except OSError as err:
        raise KmsRefusedError(f"local key file {path} is unreadable: {err.strerror}") from None
    return keys if stamp == keys.stamp else _read_key_file(path)


def _read_key_file(path: Path) -> _KeyFile:
    """Read, permission-check and validate a key file. Symlinks are followed: the checks apply to
    the file actually opened (fstat of the open descriptor, so no check-then-open race)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise KmsRefusedError(f"local key file {path} does not exist") from None
    except OSError as err:
        raise KmsRefusedError(f"local key file {path} is unreadable: {err.strerror}") from None
    with os.fdopen(fd, "rb") as file:
        st = os.fstat(file.fileno())
        if st.st_uid != os.geteuid():
            raise KmsRefusedError(f"local key file {path} is not owned by the gateway's user")
        if st.st_mode & _PRIVATE_MASK:
            raise KmsRefusedError(
                f"local key file {path} is accessible to group or others (mode {st.st_mode & 0o777:o});"
                " it must be 0600"
            )
        raw = file.read(_MAX_FILE_BYTES + 1)
    current, versions = _decode(raw, path)
    return _KeyFile(current, versions, _stamp(st))


def _decode(raw: bytes, path: Path) -> tuple[str, dict[str, bytes]]:
    malformed = KmsRefusedError(f"local key file {path} is malformed")
    if len(raw) > _MAX_FILE_BYTES:
        raise malformed
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        raise malformed from None
    if not isinstance(doc, dict) or doc.get("format") != FILE_FORMAT:
        raise malformed
    current, encoded = doc.get("current"), doc.get("versions")
    if not isinstance(current, str) or not isinstance(encoded, dict):
        raise malformed
    versions: dict[str, bytes] = {}
    for version, value in encoded.items():
        if not _VERSION.fullmatch(version) or not isinstance(value, str):
            raise malformed
        try:
            key = base64.b64decode(value, validate=True)
        except binascii.Error:
            raise malformed from None
        if len(key) != DATA_KEY_BYTES:
            raise malformed
        versions[version] = key
    if current not in versions:
        raise malformed
    return current, versions


def _encode(current: str, versions: Mapping[str, bytes]) -> bytes:
    doc = {
        "format": FILE_FORMAT,
        "current": current,
        "versions": {v: base64.b64encode(versions[v]).decode() for v in sorted(versions, key=int)},
    }
    return orjson.dumps(doc, option=orjson.OPT_INDENT_2) + b"\n"


def _create_key_file(path: Path) -> None:
    directory = path.parent
    if not directory.exists():
        with suppress(FileExistsError):
            directory.mkdir(mode=0o700, parents=True)
    with _directory_lock(directory):
        if path.exists():  # another process created it while we waited
            return
        _write_atomically(path, _encode("1", {"1": os.urandom(DATA_KEY_BYTES)}), replace=False)


@contextmanager
def _directory_lock(directory: Path) -> Iterator[None]:
    """Serialise key file changes between processes (flock on the directory: no lock file)."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as err:
        raise KmsRefusedError(f"local key directory {directory} is unusable: {err.strerror}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)


def _write_atomically(path: Path, data: bytes, *, replace: bool) -> None:
    """Write `data` to a private temporary file, fsync it, then move it into place: os.replace
    (`replace`) or a hard link, which fails rather than overwrite an existing key file."""
    temporary = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    try:
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        try:
            os.fchmod(fd, 0o600)  # exactly 0600 whatever the umask
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        if replace:
            os.replace(temporary, path)
        else:
            os.link(temporary, path)
    except FileExistsError:
        raise KmsRefusedError(f"local key file {path} already exists") from None
    except OSError as err:
        raise KmsRefusedError(f"cannot write local key file {path}: {err.strerror}") from None
    finally:
        with suppress(FileNotFoundError):
            os.unlink(temporary)
    _fsync_directory(path.parent)


def _fsync_directory(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
