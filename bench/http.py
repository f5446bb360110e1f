"""A minimal blocking HTTP client for set-up and preflight requests (no proxies from the
environment, an explicit CA for TLS)."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TIMEOUT_SECONDS = 30.0


@dataclass(frozen=True)
class Reply:
    status: int
    headers: Mapping[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)

    def text(self, limit: int = 300) -> str:
        return self.body[:limit].decode("utf-8", "replace")


class HttpClient:
    """``client.get(url, headers)``, ``client.post(url, body, headers)``; any status is returned,
    never raised."""

    def __init__(self, cafile: Path | None = None) -> None:
        handlers: list[urllib.request.BaseHandler] = [urllib.request.ProxyHandler({})]
        if cafile is not None:
            handlers.append(
                urllib.request.HTTPSHandler(context=ssl.create_default_context(cafile=str(cafile)))
            )
        self._opener = urllib.request.build_opener(*handlers)

    def request(
        self, method: str, url: str, body: bytes | None = None, headers: Mapping[str, str] | None = None
    ) -> Reply:
        # Only http(s) URLs of the servers this suite started reach here.
        request = urllib.request.Request(url, data=body, headers=dict(headers or {}), method=method)  # noqa: S310
        try:
            with self._opener.open(request, timeout=TIMEOUT_SECONDS) as answer:
                return Reply(answer.status, dict(answer.headers.items()), answer.read())
        except urllib.error.HTTPError as err:
            return Reply(err.code, dict(err.headers.items()), err.read())

    def get(self, url: str, headers: Mapping[str, str] | None = None) -> Reply:
        return self.request("GET", url, None, headers)

    def post_json(self, url: str, document: Any, headers: Mapping[str, str] | None = None) -> Reply:
        return self.request(
            "POST",
            url,
            json.dumps(document).encode(),
            {"Content-Type": "application/json", **(headers or {})},
        )

    def post_form(self, url: str, form: Mapping[str, str], headers: Mapping[str, str] | None = None) -> Reply:
        body = urllib.parse.urlencode(form).encode()
        return self.request(
            "POST", url, body, {"Content-Type": "application/x-www-form-urlencoded", **(headers or {})}
        )


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def client_token(client: HttpClient, token_url: str, client_id: str, secret: str) -> str:
    """An access token from an OAuth2 client-credentials grant (form body, no Basic header)."""
    reply = client.post_form(
        token_url, {"grant_type": "client_credentials", "client_id": client_id, "client_secret": secret}
    )
    if reply.status != 200:
        raise RuntimeError(f"token request to {token_url} failed: {reply.status} {reply.text()}")
    return str(reply.json()["access_token"])
