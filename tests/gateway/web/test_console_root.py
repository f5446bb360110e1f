"""`/console` on a gateway whose console is off: the console's redirect is not registered, and the
address answers the gateway's own 404 like any other unknown path (tests/e2e/test_console_paging.py
checks the 308 to `/console/` where the console is on)."""

from __future__ import annotations

from tests.gateway.web.conftest import InProcessGateway


async def test_console_without_the_console_enabled_is_not_found_and_not_redirected(
    gw: InProcessGateway,
) -> None:
    assert gw.settings.console.enabled is False
    answer = await gw.client.get("/console", allow_redirects=False, headers=gw.as_("root"))
    assert answer.status == 404
    assert "Location" not in answer.headers
    not_found = {"message": "Not Found", "type": "NotFoundException", "code": 404}
    assert await answer.json() == {"error": not_found}
    home = await gw.client.get("/console/", allow_redirects=False, headers=gw.as_("root"))
    assert (home.status, "Location" in home.headers) == (404, False)
