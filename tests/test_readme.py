"""The README's first screen stays true on Cedarberg's side (issue 29, part 8).

The opening keeps the two set-up commands; the "Why Cedarberg" table backs every Cedarberg claim
with a page of this repository that exists (and the section it names), and every peer claim with a
numbered source pinned to a release tag.
"""

from __future__ import annotations

import re
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]
README = REPO_ROOT / "README.md"
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
CITATION = re.compile(r"\[(\d+)\](?!\()")


def _section(text: str, heading: str) -> str:
    start = text.index(f"\n{heading}\n")
    following = re.search(r"\n#{2,3} ", text[start + len(heading) + 2 :])
    end = start + len(heading) + 2 + following.start() if following else len(text)
    return text[start:end]


def _slug(heading: str) -> str:
    """GitHub's anchor for a Markdown heading."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower().replace("`", ""))
    return text.replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    return {_slug(line.lstrip("#")) for line in path.read_text().splitlines() if line.startswith("#")}


def _rows() -> list[list[str]]:
    section = _section(README.read_text(), "### Why Cedarberg")
    lines = [line for line in section.splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in lines[2:]]


def test_the_opening_keeps_the_two_setup_commands() -> None:
    first_block = README.read_text().split("```")[1].strip().splitlines()
    assert first_block[0] == "sh"
    assert [line.partition("#")[0].strip() for line in first_block[1:]] == ["make demo", "make test"]


def test_every_cedarberg_claim_names_a_page_that_exists() -> None:
    rows = _rows()
    assert [row[0] for row in rows] == [
        "Authorization",
        "Column and row restrictions",
        "Metadata encryption",
        "Delegation (an engine acting for a user)",
        "Soft delete, undrop",
    ]
    for row in rows:
        links = LINK.findall(row[1])
        assert links, f"the Cedarberg cell of {row[0]!r} names no page"
        for link in links:
            page, _, anchor = link.partition("#")
            assert not page.startswith("http"), link
            assert (REPO_ROOT / page).is_file(), link
            if anchor:
                assert anchor in _anchors(REPO_ROOT / page), link


def test_every_peer_claim_is_sourced_at_a_release() -> None:
    section = _section(README.read_text(), "### Why Cedarberg")
    header = next(line for line in section.splitlines() if line.startswith("| |"))
    peers = [cell.strip() for cell in header.strip("|").split("|")][2:]
    assert all(re.search(r"\d+\.\d+\.\d+$", peer) for peer in peers), peers  # a version each
    sources_text = section[section.index("Sources") :]
    sources = dict(re.findall(r"\[(\d+)\] \[[^\]]+\]\((https://[^)]+)\)", sources_text))
    cited = {number for row in _rows() for cell in row[2:] for number in CITATION.findall(cell)}
    assert cited, "no peer claim cites a source"
    assert cited <= sources.keys()
    for url in sources.values():
        assert re.search(r"/blob/(apache-polaris-|v)\d+\.\d+\.\d+/", url), url  # pinned, not main
    for row in _rows():
        for cell in row[2:]:  # each peer cell is sourced, or says it is not documented
            assert CITATION.search(cell) or cell.startswith("not documented"), (row[0], cell)
