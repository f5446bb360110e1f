"""Keyset pagination for every listing.

A page token names the last item of the previous page, so a page never repeats or skips an item
that existed before the listing started, however many items are inserted meanwhile. Tokens are
opaque to clients (base64url JSON) and validated on the way in.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import orjson

from catalog.errors import InvalidRequestError

_TOKEN_VERSION = 1


@dataclass(frozen=True, slots=True)
class PageRequest:
    """`after`: resume after this name; `limit`: page size, or None for an unpaginated listing."""

    after: str | None
    limit: int | None

    @classmethod
    def parse(
        cls, page_token: str | None, page_size: str | None, default_size: int, max_size: int
    ) -> PageRequest:
        """Build from the raw query parameters. An absent `pageToken` means the client does not
        paginate (all items); an empty one means the first page."""
        size: int | None = None
        if page_size is not None:
            try:
                size = int(page_size)
            except ValueError:
                raise InvalidRequestError("pageSize must be an integer") from None
            if size < 1:
                raise InvalidRequestError("pageSize must be at least 1")
        if page_token is None and size is None:
            return cls(after=None, limit=None)
        limit = min(size or default_size, max_size)
        return cls(after=decode_token(page_token) if page_token else None, limit=limit)


def encode_token(after: str) -> str:
    raw = orjson.dumps({"v": _TOKEN_VERSION, "after": after})
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_token(token: str) -> str:
    try:
        raw = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))
        data = orjson.loads(raw)
    except (binascii.Error, ValueError):
        raise InvalidRequestError("invalid pageToken") from None
    if (
        not isinstance(data, dict)
        or data.get("v") != _TOKEN_VERSION
        or not isinstance(data.get("after"), str)
    ):
        raise InvalidRequestError("invalid pageToken")
    return str(data["after"])


@dataclass(frozen=True, slots=True)
class Page:
    items: list[str]
    next_token: str | None


async def fetch_page(page: PageRequest, fetch: Callable[[str | None, int], Awaitable[list[str]]]) -> Page:
    """Fetch one page with `fetch(after, limit)`, asking for one extra item to know if more exist."""
    if page.limit is None:
        return Page(await fetch(None, 1_000_000_000), None)
    items = await fetch(page.after, page.limit + 1)
    if len(items) > page.limit:
        items = items[: page.limit]
        return Page(items, encode_token(items[-1]))
    return Page(items, None)
