"""Deterministic raw events, the pipeline's input: what an app's event collector would drop.

``generate(out_dir, rows=..., seed=...)`` writes two batches under ``out_dir``::

    batch-1/part-0000.jsonl ...   ~60 % of the rows, days 1-10 of January 2026
    batch-2/part-0000.jsonl ...   ~40 %, days 8-14, with a NEW column ``channel``
    manifest.json                 seed, rows, and per batch its files and columns

and returns the `Manifest`. The same seed, rows and format give byte-identical files.

Each row is one delivery of an event: ``event_id`` (the business key), ``seq`` (delivery order,
higher = newer), ``user_id``, ``email`` (PII), ``country``, ``event_type`` (view, cart, purchase,
refund), ``amount`` (2 decimals; 0 unless purchase/refund), ``event_time`` (UTC, ISO-8601),
and from batch 2 on ``channel``. What makes the refine stage necessary:

- about 3 % of the deliveries are redeliveries (exact copies of an earlier row of the batch);
- about 12 % of batch 2 are corrections of batch-1 events (same ``event_id``, higher ``seq``,
  new type/amount and a ``channel``); the newest delivery of an event is its truth.
"""

# ruff: noqa: S311  (seeded, reproducible test data: nothing here is a secret)

from __future__ import annotations

import bisect
import csv
import datetime as dt
import json
import random
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass
from decimal import Decimal
from functools import lru_cache
from pathlib import Path
from typing import Any

import orjson

__all__ = ["COLUMNS", "COLUMN_TYPES", "Batch", "Manifest", "generate", "load_manifest"]

# The producer's contract: Spark SQL types of every column that may appear.
COLUMN_TYPES: dict[str, str] = {
    "event_id": "BIGINT",
    "seq": "BIGINT",
    "user_id": "BIGINT",
    "email": "STRING",
    "country": "STRING",
    "event_type": "STRING",
    "amount": "DECIMAL(12,2)",
    "event_time": "TIMESTAMP",
    "channel": "STRING",
}
BASE_COLUMNS = ("event_id", "seq", "user_id", "email", "country", "event_type", "amount", "event_time")
COLUMNS = (*BASE_COLUMNS, "channel")
EPOCH = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
FILES_PER_BATCH = 4
REDELIVERY_RATE = 0.03
CORRECTION_RATE = 0.12

_COUNTRIES = (("ZA", 30), ("NA", 10), ("BW", 8), ("KE", 14), ("NG", 16), ("GB", 12), ("DE", 10))
_EVENT_TYPES = (("view", 60), ("cart", 20), ("purchase", 15), ("refund", 5))
_CHANNELS = (("web", 50), ("app", 40), ("store", 10))
_FIRST = ("thandi", "pieter", "amara", "johan", "lerato", "sipho", "anna", "kofi", "nadia", "erik")
_LAST = ("nkosi", "van wyk", "okafor", "botha", "dlamini", "muller", "mensah", "smith", "naidoo")
_DOMAINS = ("example.com", "example.org", "mail.example.net")


@dataclass(frozen=True)
class Batch:
    number: int
    rows: int
    columns: tuple[str, ...]
    files: tuple[str, ...]  # relative to the manifest's directory


@dataclass(frozen=True)
class Manifest:
    seed: int
    rows: int
    file_format: str
    batches: tuple[Batch, ...]

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2)


def load_manifest(directory: Path) -> Manifest:
    data = json.loads((directory / "manifest.json").read_text())
    batches = tuple(
        Batch(b["number"], b["rows"], tuple(b["columns"]), tuple(b["files"])) for b in data["batches"]
    )
    return Manifest(data["seed"], data["rows"], data["file_format"], batches)


def generate(out_dir: Path, *, rows: int, seed: int, file_format: str = "json") -> Manifest:
    """Write both batches and the manifest under ``out_dir`` (emptied of earlier batches first)."""
    if file_format not in ("json", "csv"):
        raise ValueError("file_format must be json or csv")
    out_dir.mkdir(parents=True, exist_ok=True)
    rng = random.Random(seed)
    users = max(50, rows // 20)
    first_rows = rows * 6 // 10
    state = _State(rng=rng, users=users)
    batches = []
    for number, count, days, columns in (
        (1, first_rows, range(0, 10), BASE_COLUMNS),
        (2, rows - first_rows, range(7, 14), COLUMNS),
    ):
        records = list(state.batch(count, days, with_channel="channel" in columns))
        batch_dir = out_dir / f"batch-{number}"
        batch_dir.mkdir(exist_ok=True)
        for old in batch_dir.iterdir():
            old.unlink()
        files = _write_batch(batch_dir, records, columns, file_format)
        batches.append(Batch(number, count, columns, tuple(str(f.relative_to(out_dir)) for f in files)))
    manifest = Manifest(seed=seed, rows=rows, file_format=file_format, batches=tuple(batches))
    (out_dir / "manifest.json").write_text(manifest.to_json() + "\n")
    return manifest


class _State:
    """Everything generated so far, so that later rows can repeat or correct earlier ones."""

    def __init__(self, rng: random.Random, users: int) -> None:
        self.rng = rng
        self.users = users
        self.next_id = 1
        self.seq = 0
        self.earlier: list[dict[str, Any]] = []  # newest delivery per event of earlier batches

    def batch(self, count: int, days: range, *, with_channel: bool) -> Iterator[dict[str, Any]]:
        rng = self.rng
        this_batch: list[dict[str, Any]] = []
        for _ in range(count):
            roll = rng.random()
            if this_batch and roll < REDELIVERY_RATE:
                record = dict(this_batch[_below(rng, len(this_batch))])  # the same delivery, again
            elif self.earlier and with_channel and roll < REDELIVERY_RATE + CORRECTION_RATE:
                record = self._correction(self.earlier[_below(rng, len(self.earlier))])
                this_batch.append(record)
            else:
                record = self._new_event(days, with_channel=with_channel)
                this_batch.append(record)
            yield record
        latest: dict[int, dict[str, Any]] = {r["event_id"]: r for r in self.earlier}
        for record in this_batch:
            if record["seq"] > latest.get(record["event_id"], {"seq": -1})["seq"]:
                latest[record["event_id"]] = record
        self.earlier = list(latest.values())

    def _next_seq(self) -> int:
        self.seq += 1
        return self.seq

    def _new_event(self, days: range, *, with_channel: bool) -> dict[str, Any]:
        rng = self.rng
        user = 1 + _below(rng, self.users)
        event_type = _weighted(rng, _EVENT_TYPES)
        day, second = days[_below(rng, len(days))], _below(rng, 86_400)
        at = f"{_day(day)}T{second // 3600:02d}:{second // 60 % 60:02d}:{second % 60:02d}Z"
        record: dict[str, Any] = {
            "event_id": self.next_id,
            "seq": self._next_seq(),
            "user_id": user,
            "email": _email(user),
            "country": _country(user),
            "event_type": event_type,
            "amount": _amount(rng, event_type),
            "event_time": at,
        }
        if with_channel:
            record["channel"] = _weighted(rng, _CHANNELS)
        self.next_id += 1
        return record

    def _correction(self, earlier: dict[str, Any]) -> dict[str, Any]:
        rng = self.rng
        event_type = _weighted(rng, _EVENT_TYPES)
        return {
            **earlier,
            "seq": self._next_seq(),
            "event_type": event_type,
            "amount": _amount(rng, event_type),
            "channel": _weighted(rng, _CHANNELS),
        }


def _weighted(rng: random.Random, choices: Sequence[tuple[str, int]]) -> str:
    values, cumulative = _cumulative(tuple(choices))
    return values[bisect.bisect_right(cumulative, rng.random() * cumulative[-1])]


@lru_cache(maxsize=16)
def _cumulative(choices: tuple[tuple[str, int], ...]) -> tuple[tuple[str, ...], tuple[int, ...]]:
    total, cumulative = 0, []
    for _, weight in choices:
        total += weight
        cumulative.append(total)
    return tuple(c for c, _ in choices), tuple(cumulative)


def _below(rng: random.Random, n: int) -> int:
    """A uniform integer in [0, n): ``rng.randrange`` costs four times as much."""
    return int(rng.random() * n)


def _amount(rng: random.Random, event_type: str) -> Decimal:
    if event_type in ("purchase", "refund"):
        return Decimal(199 + _below(rng, 250_000 - 199)) / 100
    return Decimal("0.00")


@lru_cache(maxsize=64)
def _day(day: int) -> str:
    return (EPOCH + dt.timedelta(days=day)).strftime("%Y-%m-%d")


@lru_cache(maxsize=65_536)
def _email(user: int) -> str:
    first = _FIRST[user % len(_FIRST)]
    last = _LAST[(user // len(_FIRST)) % len(_LAST)].replace(" ", "")
    return f"{first}.{last}{user}@{_DOMAINS[user % len(_DOMAINS)]}"


@lru_cache(maxsize=65_536)
def _country(user: int) -> str:
    # A user's country is stable; countries keep the weights above.
    return _weighted(random.Random(user), _COUNTRIES)


def _write_batch(
    directory: Path, records: list[dict[str, Any]], columns: Sequence[str], file_format: str
) -> list[Path]:
    files = []
    per_file = -(-len(records) // FILES_PER_BATCH)
    for index in range(FILES_PER_BATCH):
        chunk = records[index * per_file : (index + 1) * per_file]
        if not chunk:
            break
        path = directory / f"part-{index:04d}.{'jsonl' if file_format == 'json' else 'csv'}"
        with path.open("w", newline="", encoding="utf-8") as out:
            if file_format == "json":
                for record in chunk:
                    row = {c: record[c] for c in columns}
                    row["amount"] = float(row["amount"])  # shortest repr: "12.34", parsed exactly
                    out.write(orjson.dumps(row).decode() + "\n")
            else:
                writer = csv.writer(out, lineterminator="\n")
                writer.writerow(columns)
                for record in chunk:
                    writer.writerow([str(record[c]) for c in columns])
        files.append(path)
    return files
