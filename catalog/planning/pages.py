"""Result pages of a plan: split, encoded, sealed for the store, and spliced into responses.

A page is one ScanTasks JSON object. Stored pages are sealed under the table's data key, bound to
the warehouse, the table and the page number, and carry their plan id inside the seal, so a page
cannot be moved to another plan or table unnoticed.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence

import orjson
from pyiceberg.table import FileScanTask

from catalog.errors import IntegrityCheckError
from catalog.planning.serialize import TaskEncoder
from catalog.sealing import ObjectKey
from kms import envelope
from kms.errors import SealIntegrityError

_KIND = "scan-plan"
_ID_BYTES = 24  # 192 bits: plan ids and page tokens cannot be guessed


def new_id() -> str:
    """A fresh plan id or page token."""
    return secrets.token_urlsafe(_ID_BYTES)


def encode_pages(encoder: TaskEncoder, tasks: Sequence[FileScanTask], per_page: int) -> list[bytes]:
    """The tasks as ScanTasks documents of at most `per_page` tasks each (at least one page)."""
    chunks = [tasks[start : start + per_page] for start in range(0, len(tasks), per_page)] or [[]]
    return [orjson.dumps(encoder.page(chunk)) for chunk in chunks]


def completed(page: bytes, plan_id: str | None, plan_tasks: Sequence[str]) -> bytes:
    """A CompletedPlanningResult: the first page's members with status, plan id and plan tasks."""
    head: dict[str, object] = {"status": "completed"}
    if plan_id is not None:
        head["plan-id"] = plan_id
    if plan_tasks:
        head["plan-tasks"] = list(plan_tasks)
    # Both are JSON objects; the page always has "file-scan-tasks", so splicing is well-formed.
    return orjson.dumps(head)[:-1] + b"," + page[1:]


def seal(key: ObjectKey, warehouse: str, table_uuid: str, plan_id: str, page_no: int, page: bytes) -> bytes:
    plaintext = plan_id.encode() + b"\n" + page
    return envelope.seal(key.plaintext, plaintext, envelope.Binding(warehouse, _KIND, table_uuid, page_no))


def open_page(
    key: ObjectKey, warehouse: str, table_uuid: str, plan_id: str, page_no: int, blob: bytes
) -> bytes:
    """The page's JSON. Raises IntegrityCheckError if it was not sealed for this plan and page."""
    try:
        plaintext = envelope.open_sealed(
            key.plaintext, blob, envelope.Binding(warehouse, _KIND, table_uuid, page_no)
        )
    except SealIntegrityError as err:
        raise IntegrityCheckError(f"a stored scan plan page failed its check: {err}") from None
    sealed_for, _, page = plaintext.partition(b"\n")
    if sealed_for != plan_id.encode():
        raise IntegrityCheckError("a stored scan plan page belongs to another plan")
    return page


def submitted(plan_id: str) -> bytes:
    """A submitted planning result naming the plan to poll."""
    return orjson.dumps({"status": "submitted", "plan-id": plan_id})
