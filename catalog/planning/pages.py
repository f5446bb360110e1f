"""Result pages of a plan: split, encoded, sealed for the store, and spliced into responses.

A page is one ScanTasks JSON object. Stored pages are sealed under the table's data key, bound to
the warehouse, the table and the page number, and carry their plan id inside the seal, so a page
cannot be moved to another plan or table unnoticed.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass

import orjson
from pyiceberg.table import FileScanTask

from cedarberg.catalog.errors import IntegrityCheckError
from cedarberg.catalog.planning.serialize import TaskEncoder
from cedarberg.catalog.sealing import ObjectKey
from cedarberg.kms import envelope
from cedarberg.kms.errors import SealIntegrityError

_KIND = "scan-plan"
_ID_BYTES = 24  # 192 bits: plan ids and page tokens cannot be guessed


def new_id() -> str:
    """A fresh plan id or page token."""
    return secrets.token_urlsafe(_ID_BYTES)


def encode_pages(encoder: TaskEncoder, tasks: Sequence[FileScanTask], per_page: int) -> list[bytes]:
    """The tasks as ScanTasks documents of at most `per_page` tasks each (at least one page)."""
    chunks = [tasks[start : start + per_page] for start in range(0, len(tasks), per_page)] or [[]]
    return [orjson.dumps(encoder.page(chunk)) for chunk in chunks]


def completed(page: bytes, plan_id: str, plan_tasks: Sequence[str]) -> bytes:
    """A CompletedPlanningWithIDResult (planTableScan), also a valid CompletedPlanningResult
    (fetchPlanningResult, whose schema allows the extra member): the first page's members with
    status, plan id and plan tasks."""
    head: dict[str, object] = {"status": "completed", "plan-id": plan_id}
    if plan_tasks:
        head["plan-tasks"] = list(plan_tasks)
    # Both are JSON objects; the page always has "file-scan-tasks", so splicing is well-formed.
    return orjson.dumps(head)[:-1] + b"," + page[1:]


@dataclass(frozen=True, slots=True)
class PageOf:
    """Which stored page a sealed page is: its table (warehouse, UUID), its plan and its number."""

    warehouse: str
    table_uuid: str
    plan_id: str
    page_no: int

    def binding(self) -> envelope.Binding:
        # The plan id is sealed inside the page (the binding has no room for it), see `seal`.
        return envelope.Binding(self.warehouse, _KIND, self.table_uuid, self.page_no)


def seal(key: ObjectKey, of: PageOf, page: bytes) -> bytes:
    """The page sealed with its table's key, bound to `of`."""
    plaintext = of.plan_id.encode() + b"\n" + page
    return envelope.seal(key.plaintext, plaintext, of.binding())


def open_page(key: ObjectKey, of: PageOf, blob: bytes) -> bytes:
    """The page's JSON. Raises IntegrityCheckError if it was not sealed for this plan and page."""
    plan_id = of.plan_id
    try:
        plaintext = envelope.open_sealed(key.plaintext, blob, of.binding())
    except SealIntegrityError as err:
        raise IntegrityCheckError(f"a stored scan plan page failed its check: {err}") from None
    sealed_for, _, page = plaintext.partition(b"\n")
    if sealed_for != plan_id.encode():
        raise IntegrityCheckError("a stored scan plan page belongs to another plan")
    return page


def submitted(plan_id: str) -> bytes:
    """A submitted planning result naming the plan to poll."""
    return orjson.dumps({"status": "submitted", "plan-id": plan_id})
