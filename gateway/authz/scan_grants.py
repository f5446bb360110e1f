"""The scan grants of a request: which columns and rows the caller may scan (catalog.planning.grants).

Placeholder until the Cedar column/row restrictions land: every caller that Cedar allowed to
plan a scan gets the unrestricted grant. The real implementation derives the grants from policy.
"""

from __future__ import annotations

from aiohttp import web

from catalog.planning.grants import ScanGrant


def scan_grants_for(request: web.Request) -> tuple[ScanGrant, ...]:
    """The ways the authenticated caller of `request` may scan the table it names (never empty)."""
    del request  # the placeholder does not look at the request
    return (ScanGrant(None, None),)
