"""View operations: list, create, load, replace, drop, exists, rename, register.

Create, replace and register are commits: `catalog.view_changes` plans them and
`catalog.commits.commit` gates, writes and swaps them, the same algorithm as a table commit."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from pyiceberg.view.metadata import ViewMetadata

from cedarberg.catalog import confinement, view_changes
from cedarberg.catalog.commits import CommitJob, commit, commit_response
from cedarberg.catalog.context import CatalogContext
from cedarberg.catalog.dropped import soft_drop
from cedarberg.catalog.effects import EffectGate
from cedarberg.catalog.idempotency import Body, Recorder
from cedarberg.catalog.identifiers import Identifier, Namespace
from cedarberg.catalog.lookups import VIEW, read_object, require_object
from cedarberg.catalog.lost_races import delete_unchanged, retry_lost_races
from cedarberg.catalog.objects import Move, list_objects, load_object, rename_object
from cedarberg.catalog.pagination import PageRequest
from cedarberg.catalog.requests import CommitViewRequest, CreateViewRequest, RegisterViewRequest
from cedarberg.catalog.view_changes import ViewChange

ViewJob = CommitJob[ViewMetadata]


def _one(
    identifier: Identifier, plan: Callable[[], Awaitable[ViewChange | None]], rec: Recorder | None
) -> ViewJob:
    """The commit of the one view change `plan()` makes (planned again after a lost race); its
    body is None when the change turns out to change nothing."""

    async def plan_all() -> list[ViewChange]:
        change = await plan()
        return [] if change is None else [change]

    return ViewJob(
        [identifier], plan_all, lambda changes: commit_response(changes[0]) if changes else None, rec
    )


class ViewService:
    def __init__(self, ctx: CatalogContext) -> None:
        self._ctx = ctx

    async def list_all(self, warehouse_name: str | None, namespace: Namespace, page: PageRequest) -> bytes:
        return await list_objects(self._ctx, warehouse_name, namespace, VIEW, page)

    async def create(
        self,
        warehouse_name: str | None,
        namespace: Namespace,
        request: CreateViewRequest,
        rec: Recorder | None,
        gate: EffectGate,
    ) -> Body:
        """Create a view (gated as creating everything it carries). Raises AlreadyExistsError,
        NoSuchNamespaceError, InvalidRequestError, LocationNotAllowedError and what the commit
        raises (`catalog.commits.commit`)."""
        warehouse = self._ctx.warehouse(warehouse_name)
        identifier = Identifier.of(namespace, request.name)

        async def plan() -> ViewChange:
            return await view_changes.plan_create(self._ctx, warehouse, identifier, request)

        return await commit(self._ctx, warehouse, _one(identifier, plan, rec), gate)

    async def load(self, warehouse_name: str | None, identifier: Identifier) -> bytes:
        warehouse = self._ctx.warehouse(warehouse_name)
        row = await read_object(self._ctx.store, warehouse.name, identifier, VIEW)
        return await load_object(self._ctx, row, "view")

    async def exists(self, warehouse_name: str | None, identifier: Identifier) -> None:
        warehouse = self._ctx.warehouse(warehouse_name)
        await read_object(self._ctx.store, warehouse.name, identifier, VIEW)

    async def replace(
        self,
        warehouse_name: str | None,
        identifier: Identifier,
        request: CommitViewRequest,
        rec: Recorder | None,
        gate: EffectGate,
    ) -> Body:
        """Compare-and-swap a view's metadata, like a table commit (`gate` judges the effect
        of each attempt before its file is written). Raises NoSuchViewError, CommitFailedError
        and what the commit raises (`catalog.commits.commit`)."""
        warehouse = self._ctx.warehouse(warehouse_name)

        async def plan() -> ViewChange | None:
            return await view_changes.plan_replace(self._ctx, warehouse, identifier, request)

        body = await commit(self._ctx, warehouse, _one(identifier, plan, rec), gate)
        # A commit that changes nothing writes nothing and answers the current metadata.
        return body if body is not None else await self.load(warehouse_name, identifier)

    async def drop(self, warehouse_name: str | None, identifier: Identifier, rec: Recorder | None) -> Body:
        """Drop a view (in a sealing warehouse a soft delete), only the version read: one that
        changes meanwhile is read again. Raises NoSuchViewError, CommitFailedError after repeated
        concurrent changes."""
        warehouse = self._ctx.warehouse(warehouse_name)
        if warehouse.seal_files:
            await soft_drop(self._ctx, warehouse, identifier, VIEW, rec)
            return None

        async def attempt() -> None:
            async with self._ctx.store.read() as tx:
                row = await require_object(tx, warehouse.name, identifier, VIEW)
            async with self._ctx.store.write() as tx:
                # Only the version read, as a table drop: a replace, or a drop and a create of
                # another view at the name, meanwhile is looked at again, so the roots forgotten
                # are always those of the view deleted.
                await delete_unchanged(tx, warehouse.name, identifier, row)
                await confinement.forget(tx, VIEW, row.uuid)
                if rec is not None:
                    await rec.record(tx, None)

        await retry_lost_races(
            self._ctx.limits.commit_retries,
            attempt,
            lambda: "the view changed concurrently too many times; retry the drop",
        )
        return None

    async def rename(
        self,
        warehouse_name: str | None,
        source: Identifier,
        target: Identifier,
        rec: Recorder | None,
        gate: EffectGate,
    ) -> Body:
        await rename_object(
            self._ctx, self._ctx.warehouse(warehouse_name), Move(VIEW, source, target), rec, gate
        )
        return None

    async def register(
        self,
        warehouse_name: str | None,
        namespace: Namespace,
        request: RegisterViewRequest,
        rec: Recorder | None,
        gate: EffectGate,
    ) -> Body:
        """Register a view metadata file, plain or sealed (gated as the view's arrival). The file
        is the registered view's: it is never deleted here, whatever the outcome."""
        warehouse = self._ctx.warehouse(warehouse_name)
        identifier = Identifier.of(namespace, request.name)

        async def plan() -> ViewChange:
            return await view_changes.plan_register(self._ctx, warehouse, identifier, request)

        return await commit(self._ctx, warehouse, _one(identifier, plan, rec), gate)
