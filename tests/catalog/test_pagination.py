"""Page requests and sealed page tokens: opaque, authenticated, bound to listing and caller."""

import base64
import os

import pytest

from cedarberg.catalog import page_tokens
from cedarberg.catalog.errors import InvalidRequestError
from cedarberg.catalog.page_tokens import Listing
from cedarberg.catalog.pagination import PageRequest, Scope, fetch_page

KEY = os.urandom(32)
LISTING = Listing("default", "namespaces", "", '["api-key","user","ana"]')
HIDDEN = "secret-project"
INVALID = r"^invalid pageToken$"


async def _key() -> bytes:
    return KEY


def _raw(token: str) -> bytes:
    return base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))


def test_token_round_trip_reveals_nothing() -> None:
    token = page_tokens.seal(KEY, LISTING, HIDDEN)
    assert page_tokens.open_token(KEY, LISTING, token) == HIDDEN
    assert HIDDEN.encode() not in _raw(token)
    assert HIDDEN not in token
    # Same name twice: different tokens (random nonce); names of different length: same size.
    assert page_tokens.seal(KEY, LISTING, HIDDEN) != token
    assert (
        len(page_tokens.seal(KEY, LISTING, "a"))
        == len(token)
        == len(page_tokens.seal(KEY, LISTING, "b" * 200))
    )


def test_altered_tokens_are_refused() -> None:
    token = page_tokens.seal(KEY, LISTING, HIDDEN)
    raw = bytearray(_raw(token))
    for index in (0, 5, len(raw) // 2, len(raw) - 1):
        flipped = bytearray(raw)
        flipped[index] ^= 0x01
        forged = base64.urlsafe_b64encode(bytes(flipped)).decode().rstrip("=")
        with pytest.raises(InvalidRequestError, match=INVALID):
            page_tokens.open_token(KEY, LISTING, forged)


@pytest.mark.parametrize(
    "token",
    ["!!!", "e30", "eyJ2IjoxLCJhZnRlciI6InNlY3JldC1wcm9qZWN0In0", "A" * 400, "A" * 9000],
)
def test_malformed_and_old_style_tokens_are_refused(token: str) -> None:
    with pytest.raises(InvalidRequestError, match=INVALID):
        page_tokens.open_token(KEY, LISTING, token)


@pytest.mark.parametrize(
    "other",
    [
        Listing("sales", "namespaces", "", LISTING.caller),  # another warehouse
        Listing("default", "table", "", LISTING.caller),  # another kind of listing
        Listing("default", "namespaces", "db", LISTING.caller),  # another parent
        Listing("default", "namespaces", "", '["api-key","user","bob"]'),  # another caller
        Listing("default", "namespaces", "", '["jwt","user","ana"]'),  # same id, other method
    ],
)
def test_foreign_tokens_are_refused(other: Listing) -> None:
    token = page_tokens.seal(KEY, LISTING, HIDDEN)
    with pytest.raises(InvalidRequestError, match=INVALID):
        page_tokens.open_token(KEY, other, token)


def test_a_token_of_another_deployment_is_refused() -> None:
    token = page_tokens.seal(os.urandom(32), LISTING, HIDDEN)
    with pytest.raises(InvalidRequestError, match=INVALID):
        page_tokens.open_token(KEY, LISTING, token)


def test_absent_token_and_size_means_unpaginated() -> None:
    assert PageRequest.parse(None, None, 100, 1000) == PageRequest(None, None)


def test_empty_token_means_first_page_and_size_is_capped() -> None:
    assert PageRequest.parse("", "5000", 100, 1000) == PageRequest(None, 1000)


@pytest.mark.parametrize("size", ["0", "-1", "x"])
def test_bad_page_sizes_are_refused(size: str) -> None:
    with pytest.raises(InvalidRequestError):
        PageRequest.parse("", size, 100, 1000)


async def test_fetch_page_walks_all_items_once() -> None:
    items = [f"n{i:02d}" for i in range(23)]

    async def fetch(after: str | None, limit: int) -> list[str]:
        return [i for i in items if after is None or i > after][:limit]

    seen: list[str] = []
    request = PageRequest(None, 10, "me")
    while True:
        page = await fetch_page(request, fetch, _key, Scope("default", "namespaces"))
        seen += page.items
        if page.next_token is None:
            break
        request = PageRequest(page.next_token, 10, "me")
    assert seen == items
    # The second page's token does not resume another caller's listing.
    first = await fetch_page(PageRequest(None, 10, "me"), fetch, _key, Scope("default", "namespaces"))
    assert first.next_token is not None
    with pytest.raises(InvalidRequestError):
        await fetch_page(
            PageRequest(first.next_token, 10, "you"), fetch, _key, Scope("default", "namespaces")
        )
