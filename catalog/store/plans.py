"""Rows of server-side scan plans and their result pages (see `catalog.store.schema.scan_plans`).

Every lookup names the plan (or page token) together with its owner, its table and the time: a
plan of another owner or table, or an expired one, is found exactly like one that never existed.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import delete, insert, select, update

from cedarberg.catalog.store.schema import scan_plan_pages, scan_plans
from cedarberg.catalog.store.sql import StoreTx

SUBMITTED = "submitted"
COMPLETED = "completed"
FAILED = "failed"
CANCELLED = "cancelled"


@dataclass(frozen=True, slots=True)
class PlanRow:
    plan_id: str
    warehouse: str
    table_uuid: str
    namespace: str
    name: str
    owner: str
    status: str
    error_kind: str | None
    error: str | None
    created_at_ms: int
    expires_at_ms: int


@dataclass(frozen=True, slots=True)
class PageRow:
    token: str
    plan_id: str
    page_no: int
    payload: bytes  # sealed


async def insert_plan(tx: StoreTx, plan: PlanRow) -> None:
    await tx.connection.execute(insert(scan_plans).values(**_values(plan)))


def _values(plan: PlanRow) -> dict[str, object]:
    return {name: getattr(plan, name) for name in PlanRow.__dataclass_fields__}


async def find_plan(tx: StoreTx, plan_id: str, owner: str, table_uuid: str, now_ms: int) -> PlanRow | None:
    """The live plan `plan_id` of `owner` on table `table_uuid`, or None."""
    row = (
        await tx.connection.execute(
            select(scan_plans).where(
                scan_plans.c.plan_id == plan_id,
                scan_plans.c.owner == owner,
                scan_plans.c.table_uuid == table_uuid,
                scan_plans.c.expires_at_ms > now_ms,
            )
        )
    ).first()
    return None if row is None else PlanRow(**row._asdict())


async def finish_plan(
    tx: StoreTx, plan_id: str, status: str, error_kind: str | None = None, error: str | None = None
) -> bool:
    """Move a submitted plan to `status`; False if it is no longer submitted (cancelled, swept)."""
    result = await tx.connection.execute(
        update(scan_plans)
        .where(scan_plans.c.plan_id == plan_id, scan_plans.c.status == SUBMITTED)
        .values(status=status, error_kind=error_kind, error=error)
    )
    return result.rowcount == 1


async def cancel_plan(tx: StoreTx, plan_id: str) -> None:
    """Mark a plan cancelled and delete its pages (what it held is no longer needed)."""
    await tx.connection.execute(
        update(scan_plans).where(scan_plans.c.plan_id == plan_id).values(status=CANCELLED)
    )
    await tx.connection.execute(delete(scan_plan_pages).where(scan_plan_pages.c.plan_id == plan_id))


async def insert_pages(tx: StoreTx, pages: list[PageRow]) -> None:
    if pages:
        await tx.connection.execute(
            insert(scan_plan_pages),
            [
                {"token": p.token, "plan_id": p.plan_id, "page_no": p.page_no, "payload": p.payload}
                for p in pages
            ],
        )


async def page_by_number(tx: StoreTx, plan_id: str, page_no: int) -> PageRow | None:
    row = (
        await tx.connection.execute(
            select(scan_plan_pages).where(
                scan_plan_pages.c.plan_id == plan_id, scan_plan_pages.c.page_no == page_no
            )
        )
    ).first()
    return None if row is None else PageRow(**row._asdict())


async def page_tokens(tx: StoreTx, plan_id: str) -> list[str]:
    """The tokens of every page after the first, in page order."""
    rows = await tx.connection.execute(
        select(scan_plan_pages.c.token)
        .where(scan_plan_pages.c.plan_id == plan_id, scan_plan_pages.c.page_no > 0)
        .order_by(scan_plan_pages.c.page_no)
    )
    return [str(row.token) for row in rows]


async def find_page(
    tx: StoreTx, token: str, owner: str, table_uuid: str, now_ms: int
) -> tuple[PlanRow, PageRow] | None:
    """The page `token` of a live, completed plan of `owner` on table `table_uuid`, or None."""
    row = (
        await tx.connection.execute(
            select(scan_plan_pages, scan_plans)
            .join(scan_plans, scan_plans.c.plan_id == scan_plan_pages.c.plan_id)
            .where(
                scan_plan_pages.c.token == token,
                scan_plans.c.owner == owner,
                scan_plans.c.table_uuid == table_uuid,
                scan_plans.c.status == COMPLETED,
                scan_plans.c.expires_at_ms > now_ms,
            )
        )
    ).first()
    if row is None:
        return None
    values = row._asdict()
    plan = PlanRow(**{name: values[name] for name in PlanRow.__dataclass_fields__})
    page = PageRow(**{name: values[name] for name in PageRow.__dataclass_fields__})
    return plan, page


async def delete_expired(tx: StoreTx, now_ms: int, limit: int) -> int:
    """Delete up to `limit` expired plans with their pages. Returns how many plans went."""
    ids = [
        str(row.plan_id)
        for row in await tx.connection.execute(
            select(scan_plans.c.plan_id)
            .where(scan_plans.c.expires_at_ms <= now_ms)
            .order_by(scan_plans.c.expires_at_ms)
            .limit(limit)
        )
    ]
    if ids:
        await tx.connection.execute(delete(scan_plan_pages).where(scan_plan_pages.c.plan_id.in_(ids)))
        await tx.connection.execute(delete(scan_plans).where(scan_plans.c.plan_id.in_(ids)))
    return len(ids)
