"""Keyset pagination for every listing.

A page token names the last item of the previous page, so a page never repeats or skips an item
that existed before the listing started, however many items are inserted meanwhile. Tokens are
sealed (`catalog.page_tokens`): opaque, authenticated, bound to the listing and the caller; a
token that does not open is a 400.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from cedarberg.catalog import page_tokens
from cedarberg.catalog.errors import InvalidRequestError
from cedarberg.catalog.page_tokens import Listing

KeySource = Callable[[], Awaitable[bytes]]


@dataclass(frozen=True, slots=True)
class PageRequest:
    """`token`: the sealed token to resume from (None: the first page); `limit`: page size, or
    None for an unpaginated listing; `caller`: opaque binding of who lists (the gateway's
    principal binding), which every token handed out is bound to."""

    token: str | None
    limit: int | None
    caller: str = field(default="", repr=False)

    @classmethod
    def parse(
        cls,
        page_token: str | None,
        page_size: str | None,
        default_size: int,
        max_size: int,
        caller: str = "",
    ) -> PageRequest:
        """Build from the raw query parameters. An absent `pageToken` means the client does not
        paginate (all items); an empty one means the first page (Spark sends `pageToken=`).
        Raises InvalidRequestError for a bad pageSize (the token is checked when it is opened)."""
        size: int | None = None
        if page_size is not None:
            try:
                size = int(page_size)
            except ValueError:
                raise InvalidRequestError("pageSize must be an integer") from None
            if size < 1:
                raise InvalidRequestError("pageSize must be at least 1")
        if page_token is None and size is None:
            return cls(token=None, limit=None, caller=caller)
        limit = min(size or default_size, max_size)
        return cls(token=page_token or None, limit=limit, caller=caller)


@dataclass(frozen=True, slots=True)
class Page:
    items: list[str]
    next_token: str | None


@dataclass(frozen=True, slots=True)
class Scope:
    """What is listed: a token is bound to this and to the caller (`page_tokens.Listing`)."""

    warehouse: str
    what: str  # namespaces | table | view | dropped
    parent: str = ""  # the parent namespace's key ('' for top-level namespaces and dropped objects)


async def fetch_page(
    page: PageRequest, fetch: Callable[[str | None, int], Awaitable[list[str]]], key: KeySource, scope: Scope
) -> Page:
    """Fetch one page with `fetch(after, limit)`, asking for one extra item to know if more exist.

    The listing is `scope` and the caller `page.caller`; a token is opened
    and the next one sealed with `key()` (the deployment's page-token key). Raises
    InvalidRequestError for a token that does not open for this listing and caller."""
    if page.limit is None:
        return Page(await fetch(None, 1_000_000_000), None)
    listing = Listing(scope.warehouse, scope.what, scope.parent, page.caller)
    after = None if page.token is None else page_tokens.open_token(await key(), listing, page.token)
    items = await fetch(after, page.limit + 1)
    if len(items) > page.limit:
        items = items[: page.limit]
        return Page(items, page_tokens.seal(await key(), listing, items[-1]))
    return Page(items, None)
