"""Scan plans as state in the store: planTableScan, fetchPlanningResult, cancelPlanning,
fetchScanTasks, and the sweep of expired plans.

- A scan that reads at most `max_sync_manifests` manifests is planned during the request and
  answered `completed`: the first page of tasks, plus `plan-tasks` tokens for the other pages,
  which are stored (so any instance can answer fetchScanTasks). Every completed answer names its
  plan (`plan-id`, required by the spec's CompletedPlanningWithIDResult), so even a plan of one
  page is stored: its id answers fetchPlanningResult like any other until it expires.
- A larger scan is answered `submitted` with a plan id and planned in the background; the result
  (pages, or the error) lands in the store, so any instance can answer fetchPlanningResult.
- At most `max_concurrent_plans` plans compute at once per process, sync and background alike;
  beyond that the request is refused (BusyError: 503 with Retry-After), never queued.
- Cancelling marks the plan cancelled, deletes its pages and stops its planner at the next
  manifest entry if it runs in this process (elsewhere, its result is discarded when it ends).
- Plans expire after `plan_ttl_seconds`; expired plans answer like unknown ones and are swept.
  A background plan whose process died stays `submitted` until it expires, then answers 404.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

from pyiceberg.io import FileIO
from pyiceberg.manifest import ManifestFile

from cedarberg.catalog import confinement, errors, fileio
from cedarberg.catalog.context import CatalogContext
from cedarberg.catalog.errors import (
    BusyError,
    CatalogError,
    NoSuchPlanIdError,
    NoSuchPlanTaskError,
    StorageUnavailableError,
)
from cedarberg.catalog.identifiers import Identifier
from cedarberg.catalog.lookups import TABLE, read_object
from cedarberg.catalog.planning import confined, pages
from cedarberg.catalog.planning.grants import ScanGrant
from cedarberg.catalog.planning.limits import PlanningLimits
from cedarberg.catalog.planning.request import PlanScanRequest
from cedarberg.catalog.planning.scan import Guard, PlanStopped, Scan, plan_files, prepare
from cedarberg.catalog.planning.slots import Slots
from cedarberg.catalog.sealing import ObjectKey
from cedarberg.catalog.store import plans as rows
from cedarberg.catalog.store.objects import ObjectRow
from cedarberg.catalog.table_changes import parse_metadata

log = logging.getLogger(__name__)
_SWEEP_ROUNDS = 20  # batches per sweep: bounded work, the next sweep goes on


@dataclass(frozen=True, slots=True)
class PlanAnswer:
    """A planning result: a JSON body (completed, submitted, cancelled) or the error of a failed plan."""

    body: bytes | None = None
    failure: CatalogError | None = None


@dataclass(frozen=True, slots=True)
class _Background:
    """What a background plan works on: the table's row and key, the scan and the table's roots."""

    plan_id: str
    row: ObjectRow
    key: ObjectKey
    scan: Scan
    held: Sequence[str]


@dataclass(slots=True)
class _Running:
    task: asyncio.Task[None]
    stop: threading.Event


def _now_ms() -> int:
    return int(time.time() * 1000)


class PlanService:
    """One per process; used from the event loop."""

    def __init__(self, ctx: CatalogContext, limits: PlanningLimits) -> None:
        self._ctx = ctx
        self.limits = limits
        self.slots = Slots(limits.max_concurrent_plans)  # plans computing in this process
        self._running: dict[str, _Running] = {}
        self._closing = threading.Event()

    # -- planTableScan ---------------------------------------------------------------------
    async def plan(
        self,
        warehouse_name: str | None,
        identifier: Identifier,
        request: PlanScanRequest,
        grants: Sequence[ScanGrant],
        owner: str,
    ) -> PlanAnswer:
        warehouse = self._ctx.warehouse(warehouse_name)
        row = await read_object(self._ctx.store, warehouse.name, identifier, TABLE)
        key = await self._ctx.sealer.object_key(row)
        metadata_json = self._ctx.sealer.open_record(key, row)
        held = await confinement.held(
            self._ctx, TABLE, row.uuid, confinement.roots_of_document(TABLE, metadata_json)
        )
        self._acquire()
        handed_off = False
        try:
            stop = threading.Event()
            # Parsing metadata and reading manifests take long for big tables: in a worker thread,
            # under the concurrency bound.
            work = asyncio.ensure_future(
                asyncio.to_thread(self._plan_if_small, metadata_json, request, grants, stop, held)
            )
            try:
                scan, encoded = await asyncio.shield(work)
            except asyncio.CancelledError:
                # The client went away: stop the planner and free the slot when its thread ends.
                stop.set()
                work.add_done_callback(lambda _done: self._release())
                handed_off = True
                raise
            if encoded is None:
                plan_id = await self._submit(row, owner)
                self._start(_Background(plan_id, row, key, scan, held))
                handed_off = True
                return PlanAnswer(pages.submitted(plan_id))
            return PlanAnswer(await self._complete_now(row, key, owner, encoded))
        finally:
            if not handed_off:
                self._release()

    def _acquire(self) -> None:
        if not self.slots.try_acquire():
            raise BusyError("too many scans are being planned; retry later", self.limits.retry_after_seconds)

    def _release(self) -> None:
        self.slots.release()

    def _plan_if_small(
        self,
        metadata_json: bytes,
        request: PlanScanRequest,
        grants: Sequence[ScanGrant],
        stop: threading.Event,
        held: Sequence[str],
    ) -> tuple[Scan, list[bytes] | None]:
        """The checked scan and its encoded pages, or no pages when the scan is too large to plan
        during the request. Raises what `prepare` raises (400, 403)."""
        scan = prepare(parse_metadata(metadata_json), request, grants)
        try:
            manifests = scan.manifests(_io(scan, held))
        except OSError as err:
            raise StorageUnavailableError(f"cannot read the table's manifests: {type(err).__name__}") from err
        if len(manifests) > self.limits.max_sync_manifests:
            return scan, None
        # A point-in-time scan plans from the manifests just read (an incremental one reads its own).
        return scan, self._plan_pages(scan, stop, held, None if scan.incremental else manifests)

    def _plan_pages(
        self,
        scan: Scan,
        stop: threading.Event,
        held: Sequence[str],
        manifests: Sequence[ManifestFile] | None = None,
    ) -> list[bytes]:
        guard = Guard(lambda: stop.is_set() or self._closing.is_set(), self.limits.max_files_per_plan)
        try:
            tasks = plan_files(scan, _io(scan, held), guard, manifests)
        except OSError as err:
            raise StorageUnavailableError(f"cannot read the table's manifests: {type(err).__name__}") from err
        confined.check_tasks(tasks, held)
        return pages.encode_pages(scan.encoder, tasks, self.limits.tasks_per_page)

    async def _complete_now(self, row: ObjectRow, key: ObjectKey, owner: str, encoded: list[bytes]) -> bytes:
        plan_id = pages.new_id()
        now = _now_ms()
        stored = self._page_rows(row, key, plan_id, encoded)
        async with self._ctx.store.write() as tx:
            await rows.insert_plan(tx, self._plan_row(row, plan_id, owner, rows.COMPLETED, now))
            await rows.insert_pages(tx, stored)
        return pages.completed(encoded[0], plan_id, [page.token for page in stored[1:]])

    def _plan_row(self, row: ObjectRow, plan_id: str, owner: str, status: str, now: int) -> rows.PlanRow:
        return rows.PlanRow(
            plan_id=plan_id,
            warehouse=row.warehouse,
            table_uuid=row.uuid,
            namespace=row.namespace,
            name=row.name,
            owner=owner,
            status=status,
            error_kind=None,
            error=None,
            created_at_ms=now,
            expires_at_ms=now + self.limits.plan_ttl_seconds * 1000,
        )

    @staticmethod
    def _page_rows(row: ObjectRow, key: ObjectKey, plan_id: str, encoded: list[bytes]) -> list[rows.PageRow]:
        return [
            rows.PageRow(
                token=pages.new_id(),
                plan_id=plan_id,
                page_no=page_no,
                payload=pages.seal(key, pages.PageOf(row.warehouse, row.uuid, plan_id, page_no), page),
            )
            for page_no, page in enumerate(encoded)
        ]

    # -- background plans ------------------------------------------------------------------
    async def _submit(self, row: ObjectRow, owner: str) -> str:
        plan_id = pages.new_id()
        async with self._ctx.store.write() as tx:
            await rows.insert_plan(tx, self._plan_row(row, plan_id, owner, rows.SUBMITTED, _now_ms()))
        return plan_id

    def _start(self, plan: _Background) -> None:
        """Plan in the background; the task owns one concurrency slot until it ends."""
        stop = threading.Event()
        task = asyncio.get_running_loop().create_task(self._run(plan, stop))
        self._running[plan.plan_id] = _Running(task, stop)

    async def _run(self, plan: _Background, stop: threading.Event) -> None:
        plan_id = plan.plan_id
        try:
            encoded = await asyncio.to_thread(self._plan_pages, plan.scan, stop, plan.held)
            stored = self._page_rows(plan.row, plan.key, plan_id, encoded)
            async with self._ctx.store.write() as tx:
                # Only a plan still submitted takes its result: a cancelled one stays cancelled.
                if await rows.finish_plan(tx, plan_id, rows.COMPLETED):
                    await rows.insert_pages(tx, stored)
        except PlanStopped:
            pass  # cancelled (already recorded) or shutting down (the plan expires)
        except asyncio.CancelledError:
            raise
        except CatalogError as err:
            await self._record_failure(plan_id, _error_kind(err), str(err))
        except Exception:
            log.exception("background scan planning failed")
            await self._record_failure(plan_id, "", "planning failed")
        finally:
            self._running.pop(plan_id, None)
            self._release()

    async def _record_failure(self, plan_id: str, kind: str, message: str) -> None:
        try:
            async with self._ctx.store.write() as tx:
                await rows.finish_plan(tx, plan_id, rows.FAILED, kind, message[:2000])
        except CatalogError:
            log.warning("could not record a failed scan plan; it expires instead")

    async def close(self) -> None:
        """Stop background plans (they stay submitted in the store until they expire)."""
        self._closing.set()
        running = list(self._running.values())
        for entry in running:
            entry.stop.set()
            entry.task.cancel()
        await asyncio.gather(*(entry.task for entry in running), return_exceptions=True)

    # -- fetchPlanningResult / cancelPlanning ----------------------------------------------
    async def _table(self, warehouse_name: str | None, identifier: Identifier) -> ObjectRow:
        warehouse = self._ctx.warehouse(warehouse_name)
        return await read_object(self._ctx.store, warehouse.name, identifier, TABLE)

    async def _find(self, row: ObjectRow, plan_id: str, owner: str) -> rows.PlanRow:
        async with self._ctx.store.read() as tx:
            plan = await rows.find_plan(tx, plan_id, owner, row.uuid, _now_ms())
        if plan is None:
            raise NoSuchPlanIdError(f"scan plan does not exist: {plan_id}")
        return plan

    async def result(
        self, warehouse_name: str | None, identifier: Identifier, plan_id: str, owner: str
    ) -> PlanAnswer:
        row = await self._table(warehouse_name, identifier)
        plan = await self._find(row, plan_id, owner)
        if plan.status == rows.SUBMITTED:
            return PlanAnswer(pages.submitted(plan_id))
        if plan.status == rows.CANCELLED:
            return PlanAnswer(b'{"status":"cancelled"}')
        if plan.status == rows.FAILED:
            return PlanAnswer(failure=_failure(plan.error_kind, plan.error))
        async with self._ctx.store.read() as tx:
            first = await rows.page_by_number(tx, plan_id, 0)
            tokens = await rows.page_tokens(tx, plan_id)
        if first is None:  # cancelled and swept between the two reads
            raise NoSuchPlanIdError(f"scan plan does not exist: {plan_id}")
        key = await self._ctx.sealer.object_key(row)
        page = pages.open_page(key, pages.PageOf(row.warehouse, row.uuid, plan_id, 0), first.payload)
        return PlanAnswer(pages.completed(page, plan_id, tokens))

    async def cancel(
        self, warehouse_name: str | None, identifier: Identifier, plan_id: str, owner: str
    ) -> None:
        row = await self._table(warehouse_name, identifier)
        await self._find(row, plan_id, owner)
        async with self._ctx.store.write() as tx:
            await rows.cancel_plan(tx, plan_id)
        running = self._running.get(plan_id)
        if running is not None:
            running.stop.set()

    # -- fetchScanTasks ----------------------------------------------------------------------
    async def tasks(
        self, warehouse_name: str | None, identifier: Identifier, token: str, owner: str
    ) -> bytes:
        row = await self._table(warehouse_name, identifier)
        async with self._ctx.store.read() as tx:
            found = await rows.find_page(tx, token, owner, row.uuid, _now_ms())
        if found is None:
            raise NoSuchPlanTaskError("plan task does not exist")
        plan, page = found
        key = await self._ctx.sealer.object_key(row)
        return pages.open_page(
            key, pages.PageOf(row.warehouse, row.uuid, plan.plan_id, page.page_no), page.payload
        )

    # -- expiry ------------------------------------------------------------------------------
    async def sweep(self) -> int:
        """Delete expired plans and their pages, in bounded batches. Returns how many went."""
        total = 0
        for _round in range(_SWEEP_ROUNDS):
            async with self._ctx.store.write() as tx:
                deleted = await rows.delete_expired(tx, _now_ms(), self.limits.sweep_batch)
            total += deleted
            if deleted < self.limits.sweep_batch:
                break
        return total


def _io(scan: Scan, held: Sequence[str]) -> FileIO:
    """The planner's FileIO: it opens nothing outside the table's roots `held`."""
    return confined.ConfinedFileIO(fileio.file_io(scan.metadata.location), held)


def _error_kind(err: CatalogError) -> str:
    """The name of the nearest class of `err` that `catalog.errors` defines (what `_failure`
    can rebuild: a planner's own subclass is stored as the catalog error it refines)."""
    for cls in type(err).__mro__:
        if getattr(errors, cls.__name__, None) is cls:
            return str(cls.__name__)
    return ""


def _failure(kind: str | None, message: str | None) -> CatalogError:
    """The stored error of a failed plan as the catalog error it was (a generic one otherwise)."""
    cls = getattr(errors, kind or "", None)
    text = message or "planning failed"
    if isinstance(cls, type) and issubclass(cls, CatalogError) and cls is not BusyError:
        return cls(text)
    return CatalogError(text)
