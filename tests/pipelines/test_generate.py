"""The pipeline's input generator: deterministic, and shaped so that every stage has work."""

from __future__ import annotations

import csv
import json
from decimal import Decimal
from pathlib import Path

from cedarberg.pipelines.generate import BASE_COLUMNS, COLUMNS, generate, load_manifest


def _records(directory: Path) -> list[dict[str, str]]:
    manifest = load_manifest(directory)
    out: list[dict[str, str]] = []
    for batch in manifest.batches:
        for name in batch.files:
            path = directory / name
            if manifest.file_format == "csv":
                with path.open(newline="") as handle:
                    out.extend(csv.DictReader(handle))
            else:
                for line in path.read_text().splitlines():
                    record = json.loads(line, parse_float=Decimal)
                    out.append({k: str(v) for k, v in record.items()})
    return out


def test_same_seed_same_bytes(tmp_path: Path) -> None:
    first = generate(tmp_path / "a", rows=2_000, seed=3)
    second = generate(tmp_path / "b", rows=2_000, seed=3)
    assert first == second
    for name in (f for batch in first.batches for f in batch.files):
        assert (tmp_path / "a" / name).read_bytes() == (tmp_path / "b" / name).read_bytes()
    other = generate(tmp_path / "c", rows=2_000, seed=4)
    assert (tmp_path / "c" / other.batches[0].files[0]).read_bytes() != (
        tmp_path / "a" / first.batches[0].files[0]
    ).read_bytes()


def test_batches_columns_and_counts(tmp_path: Path) -> None:
    manifest = generate(tmp_path, rows=1_000, seed=1)
    assert [b.rows for b in manifest.batches] == [600, 400]
    assert manifest.batches[0].columns == BASE_COLUMNS
    assert manifest.batches[1].columns == COLUMNS  # the new column arrives with batch 2
    assert len(_records(tmp_path)) == 1_000
    assert load_manifest(tmp_path) == manifest


def test_json_and_csv_hold_the_same_events(tmp_path: Path) -> None:
    generate(tmp_path / "j", rows=1_000, seed=5, file_format="json")
    generate(tmp_path / "c", rows=1_000, seed=5, file_format="csv")
    as_json = _records(tmp_path / "j")
    as_csv = _records(tmp_path / "c")
    assert len(as_json) == len(as_csv)
    for j, c in zip(as_json, as_csv, strict=True):
        assert j.keys() == c.keys()
        assert {k: v for k, v in j.items() if k != "amount"} == {k: v for k, v in c.items() if k != "amount"}
        assert Decimal(j["amount"]) == Decimal(c["amount"])


def test_redeliveries_and_corrections(tmp_path: Path) -> None:
    generate(tmp_path, rows=5_000, seed=9)
    records = _records(tmp_path)
    ids = [r["event_id"] for r in records]
    assert len(set(ids)) < len(ids)
    pairs = {(r["event_id"], r["seq"]) for r in records}
    assert len(pairs) < len(records)  # exact redeliveries
    assert len({e for e, _ in pairs}) < len(pairs)  # corrections: same event, newer seq
    assert all("@" in r["email"] for r in records)
