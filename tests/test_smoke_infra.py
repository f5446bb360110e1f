"""The test infrastructure itself: a gateway process starts and answers /v1/config."""

from __future__ import annotations

import requests

from tests.support.gateway import GatewayProcess


def test_gateway_answers_config(gateway: GatewayProcess) -> None:
    response = requests.get(f"{gateway.url}/v1/config", timeout=10)

    assert response.status_code == 200
    assert response.headers["Content-Type"].startswith("application/json")
    body = response.json()
    assert isinstance(body["overrides"], dict)
    assert isinstance(body["defaults"], dict)
    assert gateway.is_running()
