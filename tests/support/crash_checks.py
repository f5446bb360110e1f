"""What the crash harness checks after every kill, reading the registry and the warehouse directly.

`Checker.check` compares the registry (the SQLite file, or the PostgreSQL database through psql),
the warehouse's files and the audit logs with what the clients know they did
(`tests.support.crash_harness.Model`) and returns the violations it found:

- every registry entry names a metadata file that exists and unseals (with the gateway's own
  `catalog.sealing.Sealer` and the gateway's local KEK) as the object the entry holds, and every
  file of a table's metadata log exists;
- the objects and namespaces are exactly those the clients know of; each carries the marker of
  every change acknowledged (or resolved as applied) on it, and no object or namespace carries a
  marker of a change answered as refused or resolved as absent;
- every live or dropped object has its roots, every table or view root belongs to a live or
  dropped object, and no object is both live and dropped; a dropped object is purged within
  `PURGE_SECONDS` (an interrupted purge completes later), and then its files are gone;
- every acknowledged mutation has a successful mutation record in some gateway's audit log.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cedarberg.catalog.sealing import Sealer
from cedarberg.kms.keyring import KeyRing
from cedarberg.kms.settings import KmsSettings
from tests.support.crash_harness import Model
from tests.support.postgres import PostgresServer

WAREHOUSE = "default"
PURGE_SECONDS = 45.0  # dropped.PARKING_HOLD_MS (a drop killed while parking), then retries
_NAMESPACE_SEPARATOR = "\x1f"
_QUERIES = {
    "objects": "SELECT warehouse, namespace, name, kind, uuid, metadata_location FROM catalog_objects",
    "namespaces": "SELECT warehouse, name, properties FROM namespaces",
    "dropped": "SELECT drop_id, uuid, kind, purge_attempts, last_purge_error FROM dropped_objects",
    "roots": "SELECT kind, owner FROM object_roots",
}


@dataclass
class Figures:
    checks: int = 0
    files_unsealed: int = 0
    audit_records: int = 0
    torn_audit_lines: int = 0  # the first bytes of a record a killed process was writing
    purges_seen: int = 0


@dataclass
class Checker:
    """Checks one deployment: its registry (SQLite file or PostgreSQL database), its data
    directory (warehouse and local KEK) and its gateways' audit logs."""

    data_dir: Path
    audit_logs: list[Path]
    sqlite_path: Path | None = None
    postgres: PostgresServer | None = None
    database: str = ""
    figures: Figures = field(default_factory=Figures)
    _opened: dict[str, tuple[str, str, dict[str, Any]]] = field(default_factory=dict)
    _audited: set[str] = field(default_factory=set)
    _audit_offsets: dict[Path, int] = field(default_factory=dict)
    _dropped_since: dict[str, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._loop = asyncio.new_event_loop()
        self._keyring = KeyRing.open(KmsSettings(), self.data_dir / "kms")
        self._sealer = Sealer(self._keyring)

    def close(self) -> None:
        self._loop.run_until_complete(self._keyring.aclose())
        self._loop.close()

    # -- the checks ------------------------------------------------------------------------------
    def check(self, models: Iterable[Model], *, final: bool = False) -> list[str]:
        """The violations of the invariants (module docstring) in the state now; `final` also
        waits for every pending purge and requires the purged files to be gone."""
        models = list(models)
        self.figures.checks += 1
        if final:
            self._wait_for_purges()
        rows = self._registry()
        violations = self._pointers(rows["objects"])
        violations += self._against_models(rows, models)
        violations += self._roots_and_drops(rows)
        violations += self._audited_acknowledgements(models)
        if final:
            violations += self._purged_files_gone(models)
        return violations

    def _pointers(self, objects: list[dict[str, Any]]) -> list[str]:
        found: list[str] = []
        for row in objects:
            location = str(row["metadata_location"])
            where = f"{row['kind']} {row['namespace']}.{row['name']} -> {location}"
            try:
                kind, object_uuid, metadata = self._open(location)
            except Exception as err:  # any failure to read or unseal is the violation reported
                found.append(f"{where}: the metadata file does not open: {type(err).__name__}: {err}")
                continue
            if (kind, object_uuid) != (row["kind"], row["uuid"]):
                found.append(f"{where}: the file belongs to {kind} {object_uuid}, not {row['uuid']}")
            for entry in metadata.get("metadata-log", []):
                if not _local(entry["metadata-file"]).is_file():
                    found.append(f"{where}: its metadata log names a missing file {entry['metadata-file']}")
        return found

    def _against_models(self, rows: dict[str, list[dict[str, Any]]], models: list[Model]) -> list[str]:
        found: list[str] = []
        expected_namespaces = {name: markers for m in models for name, markers in m.namespaces.items()}
        namespaces = {str(r["name"]): json.loads(r["properties"]) for r in rows["namespaces"]}
        if set(namespaces) != set(expected_namespaces):
            found.append(
                f"namespaces {sorted(namespaces)} but the clients made {sorted(expected_namespaces)}"
            )
        forbidden = set().union(*(m.forbidden for m in models)) if models else set()
        for name, properties in namespaces.items():
            missing = expected_namespaces.get(name, set()) - set(properties)
            if missing:
                found.append(f"namespace {name}: acknowledged properties lost: {sorted(missing)}")
            if forbidden & set(properties):
                found.append(
                    f"namespace {name}: properties of refused changes: {sorted(forbidden & set(properties))}"
                )
        for kind in ("table", "view"):
            expected = {key: markers for m in models for key, markers in getattr(m, f"{kind}s").items()}
            live = {
                (_namespace(r["namespace"]), str(r["name"])): str(r["metadata_location"])
                for r in rows["objects"]
                if r["kind"] == kind
            }
            if set(live) != set(expected):
                extra, lost = sorted(set(live) - set(expected)), sorted(set(expected) - set(live))
                found.append(
                    f"{kind}s: in the registry, never acknowledged {extra}; acknowledged, missing {lost}"
                )
            for key, location in live.items():
                if location not in self._opened:
                    continue  # reported by `_pointers`
                properties = set(self._opened[location][2].get("properties", {}))
                missing = expected.get(key, set()) - properties
                if missing:
                    found.append(f"{kind} {key}: acknowledged changes lost: {sorted(missing)}")
                refused = sorted(forbidden & properties)
                if refused:
                    found.append(f"{kind} {key}: changes answered as failed are there: {refused}")
        return found

    def _roots_and_drops(self, rows: dict[str, list[dict[str, Any]]]) -> list[str]:
        found: list[str] = []
        live = {str(r["uuid"]): str(r["kind"]) for r in rows["objects"]}
        dropped = {str(r["uuid"]): str(r["kind"]) for r in rows["dropped"]}
        owners = {(str(r["kind"]), str(r["owner"])) for r in rows["roots"]}
        both = set(live) & set(dropped)
        if both:
            found.append(f"objects both live and dropped: {sorted(both)}")
        for object_uuid, kind in {**dropped, **live}.items():
            if (kind, object_uuid) not in owners:
                found.append(f"{kind} {object_uuid} has no recorded roots")
        orphans = sorted(
            o for k, o in owners if k in ("table", "view") and o not in live and o not in dropped
        )
        if orphans:
            found.append(f"roots of objects that no longer exist: {orphans}")
        now = time.monotonic()
        for row in rows["dropped"]:
            since = self._dropped_since.setdefault(str(row["drop_id"]), now)
            if now - since > PURGE_SECONDS:
                found.append(
                    f"dropped {row['kind']} {row['uuid']} not purged after {PURGE_SECONDS:.0f} s: {row}"
                )
        for drop_id in set(self._dropped_since) - {str(r["drop_id"]) for r in rows["dropped"]}:
            del self._dropped_since[drop_id]
            self.figures.purges_seen += 1
        return found

    def _audited_acknowledgements(self, models: list[Model]) -> list[str]:
        self._read_audit_logs()
        missing = sorted({rid for m in models for rid in m.acknowledged} - self._audited)
        return [f"acknowledged mutations without their audit record: {missing}"] if missing else []

    def _purged_files_gone(self, models: list[Model]) -> list[str]:
        found = []
        for location in (loc for m in models for loc in m.purged):
            directory = _local(location)
            left = [p for p in directory.rglob("*") if p.is_file()] if directory.exists() else []
            if left:
                found.append(f"purged table {location} left {len(left)} files, e.g. {left[0]}")
        return found

    def _wait_for_purges(self) -> None:
        deadline = time.monotonic() + PURGE_SECONDS
        while self._registry()["dropped"] and time.monotonic() < deadline:
            time.sleep(0.2)

    # -- reading ---------------------------------------------------------------------------------
    def _open(self, location: str) -> tuple[str, str, dict[str, Any]]:
        """(kind, object UUID, metadata) of a sealed metadata file; files never change once
        written, so each is opened once."""
        if location not in self._opened:
            content = _local(location).read_bytes()
            opened = self._loop.run_until_complete(self._sealer.open_file(WAREHOUSE, location, content))
            metadata = json.loads(opened.metadata_json)
            self._opened[location] = (str(opened.kind), str(opened.object_uuid), metadata)
            self.figures.files_unsealed += 1
        return self._opened[location]

    def _registry(self) -> dict[str, list[dict[str, Any]]]:
        if self.sqlite_path is not None:
            connection = sqlite3.connect(self.sqlite_path, timeout=30)
            connection.row_factory = sqlite3.Row
            try:
                with connection:  # one read transaction: one consistent state
                    connection.execute("BEGIN")
                    return {
                        name: [dict(r) for r in connection.execute(sql)] for name, sql in _QUERIES.items()
                    }
            finally:
                connection.close()
        assert self.postgres is not None
        union = ", ".join(
            f"'{name}', (SELECT coalesce(json_agg(q), '[]') FROM ({sql}) q)" for name, sql in _QUERIES.items()
        )
        answer = self.postgres.psql(f"SELECT json_build_object({union})", self.database)
        result: dict[str, list[dict[str, Any]]] = json.loads(answer)
        return result

    def _read_audit_logs(self) -> None:
        for path in self.audit_logs:
            if not path.exists():
                continue
            with path.open("rb") as log:
                log.seek(self._audit_offsets.get(path, 0))
                data = log.read()
            complete = data[: data.rfind(b"\n") + 1]  # a line still being written is read next time
            self._audit_offsets[path] = self._audit_offsets.get(path, 0) + len(complete)
            for line in complete.splitlines():
                try:
                    record = json.loads(line)
                except json.JSONDecodeError:
                    # A record SIGKILL cut short (never acknowledged: its process died before the
                    # write returned) stands alone on its line; a record glued to one would be
                    # lost here, and its acknowledgement reported unaudited below.
                    self.figures.torn_audit_lines += 1
                    continue
                self.figures.audit_records += 1
                if record["event"] == "mutation" and record["outcome"] == "success":
                    self._audited.add(str(record["request_id"]))


def _namespace(encoded: Any) -> str:
    return ".".join(str(encoded).split(_NAMESPACE_SEPARATOR))


def _local(location: str) -> Path:
    parsed = urllib.parse.urlparse(location)
    assert parsed.scheme in ("", "file"), location
    return Path(urllib.parse.unquote(parsed.path))
