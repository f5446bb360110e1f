"""How the catalog seals what it stores, on top of `kms` (which knows nothing of the catalog).

- Every table and view has its own data key, created with it and stored only wrapped by the KEK.
  The KMS binds the wrapped key to {warehouse, kind, object UUID} where it can carry a context.
- The registry's copy of an object's metadata is sealed with that key, bound to warehouse, kind,
  object UUID and the metadata version (from the metadata file name), so a sealed copy moved to
  another row or an older copy put back is refused.
- Metadata files in a sealing warehouse are sealed the same way, and are self-describing: the
  envelope carries the wrapped key and the KEK URI, and the sealed payload names the object, so a
  registry can be rebuilt from the warehouse and the KMS alone.
- Idempotent responses are sealed under a registry-wide data key; metrics reports under their
  table's key, so purging a table shreds its reports too.
- Keys for one purpose each (page tokens, idempotency record names) are derived from the registry
  key with HKDF, so every instance sharing the registry and the KMS derives the same keys.

kms errors become catalog errors here: an unreachable or refusing KMS is a 503 (fail closed,
nothing written), a document that fails its checks an IntegrityCheckError.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TypeVar

import orjson
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.kdf.hkdf import HKDF

from cedarberg.catalog import fileio
from cedarberg.catalog.errors import IntegrityCheckError, InvalidRequestError, KeyServiceUnavailableError
from cedarberg.catalog.identifiers import SEPARATOR, Identifier
from cedarberg.catalog.store import keys as key_rows
from cedarberg.catalog.store.objects import ObjectRow
from cedarberg.catalog.store.pool import Store
from cedarberg.kms import envelope
from cedarberg.kms.envelope import Binding
from cedarberg.kms.errors import KmsError, SealIntegrityError
from cedarberg.kms.keyring import KeyRing
from cedarberg.kms.keys import WrappedKey

T = TypeVar("T")
REGISTRY_KEY = "registry"
_REGISTRY_KIND = "registry"
_DOCUMENT_KIND = "document"
_DERIVED_KEY_BYTES = 32


class KeyPurpose(StrEnum):
    """What a key derived from the registry key is for (the HKDF info): one key per purpose, so
    a value made for one purpose is never accepted for another."""

    PAGE_TOKENS = "cedarberg/page-tokens/v1"
    IDEMPOTENCY = "cedarberg/idempotency/v1"


@dataclass(frozen=True, slots=True)
class ObjectKey:
    """An object's data key: plaintext (memory only) and wrapped (stored)."""

    plaintext: bytes = field(repr=False)
    wrapped: WrappedKey


@dataclass(frozen=True, slots=True)
class OpenedFile:
    """A metadata file read from the warehouse, opened if it was sealed."""

    metadata_json: bytes
    sealed_key: WrappedKey | None  # the data key a sealed file carries
    kind: str | None  # the object a sealed file names (None for plaintext files)
    object_uuid: str | None
    identifier: tuple[list[str], str] | None


@dataclass(frozen=True, slots=True)
class SealTarget:
    """The version of an object a sealed document belongs to.

    A registry copy is bound to warehouse, kind, UUID and the version named by the metadata
    location; a metadata file names the identifier too, so the registry can be rebuilt from it.
    The registry copy's binding leaves the identifier out because a rename moves the row
    without resealing it.
    """

    warehouse: str
    identifier: Identifier
    kind: str
    object_uuid: str
    metadata_location: str

    def binding(self) -> Binding:
        return binding(self.warehouse, self.kind, self.object_uuid, self.metadata_location)


def object_context(warehouse: str, kind: str, object_uuid: str) -> dict[str, str]:
    """What the KMS binds an object's wrapped data key to."""
    return {"warehouse": warehouse, "kind": kind, "object": object_uuid}


def binding(warehouse: str, kind: str, object_uuid: str, metadata_location: str) -> Binding:
    return Binding(warehouse, kind, object_uuid, fileio.parse_metadata_version(metadata_location))


@asynccontextmanager
async def _kms_errors(what: str) -> AsyncIterator[None]:
    try:
        yield
    except SealIntegrityError as err:
        raise IntegrityCheckError(f"{what}: {err}") from None
    except KmsError as err:
        # Fail closed: without the key nothing is read or written. The KMS's own message names
        # the provider and operation only, never key material.
        raise KeyServiceUnavailableError(f"key management service unavailable ({what}): {err}") from None


class Sealer:
    """Seals and opens the catalog's documents. One per process; thread-safe for asyncio."""

    def __init__(self, keyring: KeyRing) -> None:
        self.keyring = keyring
        self._registry_key: tuple[str, WrappedKey] | None = None
        # One entry per KeyPurpose at most: bounded by the enum.
        self._derived: dict[KeyPurpose, bytes] = {}

    async def _call(self, what: str, call: Awaitable[T]) -> T:
        async with _kms_errors(what):
            return await call

    # -- object keys ------------------------------------------------------------------------
    async def new_object_key(self, warehouse: str, kind: str, object_uuid: str) -> ObjectKey:
        key = await self._call(
            "new data key", self.keyring.new_data_key(object_context(warehouse, kind, object_uuid))
        )
        return ObjectKey(key.plaintext, key.wrapped)

    async def object_key(self, row: ObjectRow) -> ObjectKey:
        wrapped = row.data_key
        return await self.unwrap_object_key(row.warehouse, row.kind, row.uuid, wrapped)

    async def unwrap_object_key(
        self, warehouse: str, kind: str, object_uuid: str, wrapped: WrappedKey
    ) -> ObjectKey:
        plaintext = await self._call(
            "unwrap data key", self.keyring.unwrap(wrapped, object_context(warehouse, kind, object_uuid))
        )
        return ObjectKey(plaintext, wrapped)

    def forget(self, wrapped: WrappedKey) -> None:
        self.keyring.forget(wrapped)

    async def current_kek_version(self) -> str:
        return await self._call("current KEK version", self.keyring.current_version())

    async def rewrap(self, wrapped: WrappedKey, context: dict[str, str], version: str) -> WrappedKey | None:
        return await self._call("rewrap data key", self.keyring.rewrap(wrapped, context, version))

    # -- registry copies --------------------------------------------------------------------
    def seal_record(self, key: ObjectKey, target: SealTarget, document: bytes) -> bytes:
        """The registry copy of `document`, sealed with the object's `key` for `target`."""
        return envelope.seal(key.plaintext, document, target.binding())

    def open_record(self, key: ObjectKey, row: ObjectRow) -> bytes:
        try:
            return envelope.open_sealed(
                key.plaintext, row.metadata, binding(row.warehouse, row.kind, row.uuid, row.metadata_location)
            )
        except SealIntegrityError as err:
            # Named as the caller names it (and by UUID, for the operator's backup): the caller
            # may load this object, so neither tells them anything new.
            name = ".".join([*row.namespace.split(SEPARATOR), row.name])
            raise IntegrityCheckError(
                f"stored metadata of {row.kind} {name} ({row.uuid}) failed its check: {err}"
            ) from None

    async def open_row(self, row: ObjectRow) -> bytes:
        """The plaintext metadata JSON of a stored object."""
        return self.open_record(await self.object_key(row), row)

    # -- metadata files ---------------------------------------------------------------------
    def seal_file(self, key: ObjectKey, target: SealTarget, document: bytes) -> bytes:
        """A self-describing sealed metadata file: it names the object and carries the wrapped key."""
        identifier = target.identifier
        payload = (
            orjson.dumps(
                {"kind": target.kind, "namespace": list(identifier.namespace.levels), "name": identifier.name}
            )[:-1]
            + b',"metadata":'
            + document
            + b"}"
        )
        return envelope.seal(key.plaintext, payload, target.binding(), embed=key.wrapped)

    async def open_file(self, warehouse: str, location: str, content: bytes) -> OpenedFile:
        """Open a metadata file: a sealed one with the key it carries, a plaintext one as is.

        Raises InvalidRequestError for a sealed file that fails its checks or belongs to another
        warehouse, KeyServiceUnavailableError if the KMS cannot unwrap its key.
        """
        if not envelope.is_sealed(content):
            return OpenedFile(content, None, None, None, None)
        try:
            header = envelope.read_header(content)
        except SealIntegrityError as err:
            raise InvalidRequestError(f"sealed metadata file is damaged: {err}") from None
        found = header.binding
        if header.wrapped_key is None:
            raise InvalidRequestError("sealed metadata file carries no data key")
        if found.warehouse != warehouse:
            raise InvalidRequestError("sealed metadata file belongs to another warehouse")
        key = await self.unwrap_object_key(warehouse, found.kind, found.object_uuid, header.wrapped_key)
        expected = Binding(warehouse, found.kind, found.object_uuid, fileio.parse_metadata_version(location))
        try:
            payload = orjson.loads(envelope.open_sealed(key.plaintext, content, expected))
        except SealIntegrityError as err:
            raise InvalidRequestError(f"sealed metadata file failed its check: {err}") from None
        metadata_json = orjson.dumps(payload["metadata"])
        return OpenedFile(
            metadata_json,
            header.wrapped_key,
            found.kind,
            found.object_uuid,
            ([str(level) for level in payload["namespace"]], str(payload["name"])),
        )

    # -- registry-wide documents ------------------------------------------------------------
    async def registry_key(self, store: Store) -> ObjectKey:
        """The registry's own data key (created on first use). Call outside write transactions:
        it may read and write the registry and call the KMS."""
        if self._registry_key is None:
            async with store.read() as tx:
                found = await key_rows.get_registry_key(tx, REGISTRY_KEY)
            if found is None:
                key_uuid = str(uuid.uuid4())
                new = await self.new_object_key("", _REGISTRY_KIND, key_uuid)
                async with store.write() as tx:
                    stored = await key_rows.insert_registry_key(tx, REGISTRY_KEY, key_uuid, new.wrapped)
                if stored:
                    found = (key_uuid, new.wrapped)
                else:  # another instance created it first
                    async with store.read() as tx:
                        found = await key_rows.get_registry_key(tx, REGISTRY_KEY)
            if found is None:
                raise IntegrityCheckError("registry data key vanished")
            self._registry_key = found
        key_uuid, wrapped = self._registry_key
        return await self.unwrap_object_key("", _REGISTRY_KIND, key_uuid, wrapped)

    async def derived_key(self, store: Store, purpose: KeyPurpose) -> bytes:
        """A 256-bit key for `purpose`, derived (HKDF-SHA256) from the registry key: the same on
        every instance sharing the registry and the KMS, and across restarts. Kept in memory for
        the process's life after the first call (rotating the KEK rewraps the registry key but
        never changes it, so the derived key stays valid). Call outside write transactions.
        Raises KeyServiceUnavailableError if the KMS cannot unwrap the registry key."""
        found = self._derived.get(purpose)
        if found is None:
            registry = await self.registry_key(store)
            found = HKDF(
                algorithm=hashes.SHA256(), length=_DERIVED_KEY_BYTES, salt=None, info=purpose.value.encode()
            ).derive(registry.plaintext)
            self._derived[purpose] = found
        return found

    def reset_registry_key(self) -> None:
        """Forget the registry key's wrapped form (after a rotation replaced it)."""
        self._registry_key = None

    @staticmethod
    def seal_document(key: ObjectKey, name: str, document: Any) -> bytes:
        """Seal a JSON document under the registry key, bound to `name` (a UUID)."""
        return envelope.seal(key.plaintext, orjson.dumps(document), Binding("", _DOCUMENT_KIND, name, 0))

    @staticmethod
    def open_document(key: ObjectKey, name: str, blob: bytes) -> Any:
        try:
            return orjson.loads(
                envelope.open_sealed(key.plaintext, blob, Binding("", _DOCUMENT_KIND, name, 0))
            )
        except SealIntegrityError as err:
            raise IntegrityCheckError(f"stored document {name} failed its check: {err}") from None

    def seal_report(self, key: ObjectKey, row: ObjectRow, report: Any) -> bytes:
        return envelope.seal(
            key.plaintext, orjson.dumps(report), Binding(row.warehouse, "metrics", row.uuid, 0)
        )
