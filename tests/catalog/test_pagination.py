"""Page tokens and page requests."""

import pytest

from catalog.errors import InvalidRequestError
from catalog.pagination import PageRequest, decode_token, encode_token, fetch_page


def test_token_round_trip() -> None:
    assert decode_token(encode_token("a\x1fb")) == "a\x1fb"


@pytest.mark.parametrize("token", ["!!!", "e30", "eyJ2IjoyLCJhZnRlciI6IngifQ"])
def test_bad_tokens_are_refused(token: str) -> None:
    with pytest.raises(InvalidRequestError):
        decode_token(token)


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
    request = PageRequest(None, 10)
    while True:
        page = await fetch_page(request, fetch)
        seen += page.items
        if page.next_token is None:
            break
        request = PageRequest(decode_token(page.next_token), 10)
    assert seen == items
