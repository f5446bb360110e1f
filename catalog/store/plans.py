"""Rows of server-side scan plans and their result pages (see `catalog.store.schema.scan_plans`).

Every lookup names the plan (or page token) together with its owner, its table and the time: a
plan of another owner or table, or an expired one, is found exactly like one that never existed.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from sqlalchemy import bindparam as param
from sqlalchemy import delete, insert, select, update

from cedarberg.catalog.store.schema import scan_plan_pages, scan_plans
from cedarberg.catalog.store.statements import Sql, in_params, values_of
from cedarberg.catalog.store.tx import StoreTx

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


_PLAN_FIELDS = tuple(PlanRow.__dataclass_fields__)
_PAGE_FIELDS = tuple(PageRow.__dataclass_fields__)
_plan = scan_plans.c
_page = scan_plan_pages.c
_INSERT_PLAN = Sql(insert(scan_plans).values(values_of(scan_plans, *_PLAN_FIELDS)))
_FIND_PLAN = Sql(
    select(*[_plan[name] for name in _PLAN_FIELDS]).where(
        _plan.plan_id == param("plan_id"),
        _plan.owner == param("owner"),
        _plan.table_uuid == param("table_uuid"),
        _plan.expires_at_ms > param("now"),
    )
)
_FINISH_PLAN = Sql(
    update(scan_plans)
    .where(_plan.plan_id == param("plan_id"), _plan.status == SUBMITTED)
    .values(status=param("status"), error_kind=param("error_kind"), error=param("error"))
)
_CANCEL_PLAN = Sql(update(scan_plans).where(_plan.plan_id == param("plan_id")).values(status=CANCELLED))
_DELETE_PAGES = Sql(delete(scan_plan_pages).where(_page.plan_id == param("plan_id")))
_INSERT_PAGE = Sql(insert(scan_plan_pages).values(values_of(scan_plan_pages, *_PAGE_FIELDS)))
_PAGE_BY_NUMBER = Sql(
    select(*[_page[name] for name in _PAGE_FIELDS]).where(
        _page.plan_id == param("plan_id"), _page.page_no == param("page_no")
    )
)
_PAGE_TOKENS = Sql(
    select(_page.token).where(_page.plan_id == param("plan_id"), _page.page_no > 0).order_by(_page.page_no)
)
# The plan's columns, then the page's (its plan_id is the plan's).
_FIND_PAGE = Sql(
    select(*[_plan[name] for name in _PLAN_FIELDS], _page.token, _page.page_no, _page.payload)
    .join_from(scan_plan_pages, scan_plans, _plan.plan_id == _page.plan_id)
    .where(
        _page.token == param("token"),
        _plan.owner == param("owner"),
        _plan.table_uuid == param("table_uuid"),
        _plan.status == COMPLETED,
        _plan.expires_at_ms > param("now"),
    )
)
_EXPIRED = Sql(
    select(_plan.plan_id)
    .where(_plan.expires_at_ms <= param("now"))
    .order_by(_plan.expires_at_ms)
    .limit(param("limit"))
)


@lru_cache(maxsize=16)
def _delete_plans(count: int) -> tuple[Sql, Sql]:
    """(delete the pages of, delete) `count` plans named by id (one shape per count)."""
    ids = [param(f"p{i}", type_=_plan.plan_id.type) for i in range(count)]
    return (
        Sql(delete(scan_plan_pages).where(_page.plan_id.in_(ids))),
        Sql(delete(scan_plans).where(_plan.plan_id.in_(ids))),
    )


def _values(plan: PlanRow) -> dict[str, Any]:
    return {name: getattr(plan, name) for name in _PLAN_FIELDS}


async def insert_plan(tx: StoreTx, plan: PlanRow) -> None:
    await tx.connection.execute(_INSERT_PLAN, _values(plan))


async def find_plan(tx: StoreTx, plan_id: str, owner: str, table_uuid: str, now_ms: int) -> PlanRow | None:
    """The live plan `plan_id` of `owner` on table `table_uuid`, or None."""
    row = (
        await tx.connection.execute(
            _FIND_PLAN, {"plan_id": plan_id, "owner": owner, "table_uuid": table_uuid, "now": now_ms}
        )
    ).first()
    return None if row is None else PlanRow(*row)


async def finish_plan(
    tx: StoreTx, plan_id: str, status: str, error_kind: str | None = None, error: str | None = None
) -> bool:
    """Move a submitted plan to `status`; False if it is no longer submitted (cancelled, swept)."""
    result = await tx.connection.execute(
        _FINISH_PLAN, {"plan_id": plan_id, "status": status, "error_kind": error_kind, "error": error}
    )
    return result.rowcount == 1


async def cancel_plan(tx: StoreTx, plan_id: str) -> None:
    """Mark a plan cancelled and delete its pages (what it held is no longer needed)."""
    await tx.connection.execute(_CANCEL_PLAN, {"plan_id": plan_id})
    await tx.connection.execute(_DELETE_PAGES, {"plan_id": plan_id})


async def insert_pages(tx: StoreTx, pages: list[PageRow]) -> None:
    if pages:
        await tx.connection.execute_many(
            _INSERT_PAGE,
            [
                {"token": p.token, "plan_id": p.plan_id, "page_no": p.page_no, "payload": p.payload}
                for p in pages
            ],
        )


async def page_by_number(tx: StoreTx, plan_id: str, page_no: int) -> PageRow | None:
    row = (await tx.connection.execute(_PAGE_BY_NUMBER, {"plan_id": plan_id, "page_no": page_no})).first()
    return None if row is None else PageRow(*row)


async def page_tokens(tx: StoreTx, plan_id: str) -> list[str]:
    """The tokens of every page after the first, in page order."""
    rows = await tx.connection.execute(_PAGE_TOKENS, {"plan_id": plan_id})
    return [str(row.token) for row in rows]


async def find_page(
    tx: StoreTx, token: str, owner: str, table_uuid: str, now_ms: int
) -> tuple[PlanRow, PageRow] | None:
    """The page `token` of a live, completed plan of `owner` on table `table_uuid`, or None."""
    row = (
        await tx.connection.execute(
            _FIND_PAGE, {"token": token, "owner": owner, "table_uuid": table_uuid, "now": now_ms}
        )
    ).first()
    if row is None:
        return None
    plan = PlanRow(*row[: len(_PLAN_FIELDS)])
    token_, page_no, payload = row[len(_PLAN_FIELDS) :]
    return plan, PageRow(token_, plan.plan_id, page_no, payload)


async def delete_expired(tx: StoreTx, now_ms: int, limit: int) -> int:
    """Delete up to `limit` expired plans with their pages. Returns how many plans went."""
    ids = [str(row.plan_id) for row in await tx.connection.execute(_EXPIRED, {"now": now_ms, "limit": limit})]
    if ids:
        delete_pages, delete_plans = _delete_plans(len(ids))
        await tx.connection.execute(delete_pages, in_params("p", ids))
        await tx.connection.execute(delete_plans, in_params("p", ids))
    return len(ids)
