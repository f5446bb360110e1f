"""SigV4 signatures for S3 requests of engines that hold no S3 keys (remote signing).

The gateway signs with the warehouse's own credentials, after `sign_scope.classify` and Cedar have
allowed the request. It never sees the body of an upload: it signs the payload hash the engine
declares in `x-amz-content-sha256` (or UNSIGNED-PAYLOAD), as S3 itself allows, so the engine
cannot change what is signed without invalidating the signature. A request whose body the gateway
checked (a multi-object delete) is signed with the hash of that very body, whatever the engine
declares: a signature obtained for one list of keys cannot delete another.
"""

from __future__ import annotations

import asyncio
import functools
import importlib.util
from collections.abc import Mapping, Sequence
from typing import Any

from cedarberg.catalog.errors import InvalidRequestError
from cedarberg.gateway.config.storage import DEFAULT_REGION, S3Settings
from cedarberg.gateway.storage.sign_scope import Endpoint

# Headers the signature sets itself: whatever the engine sent for them is dropped.
_SIGNATURE_HEADERS = ("Authorization", "X-Amz-Date", "X-Amz-Security-Token", "X-Amz-Content-SHA256")
_UNSIGNED_PAYLOAD = "UNSIGNED-PAYLOAD"
_PAYLOAD = "cedarberg_declared_payload"


@functools.cache
def _declared_payload_auth() -> Any:
    """S3SigV4Auth signing the payload hash the engine declared (botocore is imported lazily)."""
    from botocore.auth import S3SigV4Auth

    class DeclaredPayloadAuth(S3SigV4Auth):  # type: ignore[misc]
        def payload(self, request: Any) -> str:
            return str(request.context[_PAYLOAD])

    return DeclaredPayloadAuth


def endpoint_of(s3: S3Settings | None) -> Endpoint:
    region = s3.region if s3 is not None else DEFAULT_REGION
    if s3 is None or s3.endpoint is None:
        return Endpoint("https", None, region)
    scheme, _, host = s3.endpoint.partition("://")
    return Endpoint(scheme, host.lower(), region)


class RequestSigner:
    """Signs S3 requests for one warehouse with its credentials (configured keys, or the process's
    AWS default credential chain)."""

    def __init__(self, s3: S3Settings | None) -> None:
        self._s3 = s3
        self._region = s3.region if s3 is not None else DEFAULT_REGION
        self._credentials: Any = None

    async def sign(
        self,
        method: str,
        uri: str,
        headers: Mapping[str, Sequence[str]],
        payload_sha256: str | None = None,
    ) -> dict[str, list[str]]:
        """The headers to add to the request: Authorization, X-Amz-Date, X-Amz-Content-SHA256 and
        X-Amz-Security-Token when the credentials have one. Raises InvalidRequestError when the
        warehouse has no credentials to sign with."""
        if importlib.util.find_spec("botocore") is None:
            raise InvalidRequestError("remote signing needs botocore: pip install 'cedarberg[s3]'")
        return await asyncio.to_thread(self._sign, method, uri, headers, payload_sha256)

    def _sign(
        self, method: str, uri: str, headers: Mapping[str, Sequence[str]], payload_sha256: str | None
    ) -> dict[str, list[str]]:
        from botocore.awsrequest import AWSRequest

        declared = _UNSIGNED_PAYLOAD
        kept: dict[str, str] = {}
        for name, values in headers.items():
            if name.lower() == "x-amz-content-sha256" and values:
                declared = values[0]
            elif name.lower() not in {h.lower() for h in _SIGNATURE_HEADERS}:
                kept[name] = ", ".join(values)

        if payload_sha256 is not None:
            declared = payload_sha256
        request = AWSRequest(method=method.upper(), url=uri, headers=kept)
        request.context[_PAYLOAD] = declared
        _declared_payload_auth()(self._frozen_credentials(), "s3", self._region).add_auth(request)
        return {name: [request.headers[name]] for name in _SIGNATURE_HEADERS if name in request.headers}

    def _frozen_credentials(self) -> Any:
        from botocore.credentials import Credentials

        s3 = self._s3
        if s3 is not None and s3.access_key_id is not None and s3.secret_access_key is not None:
            token = s3.session_token.get_secret_value() if s3.session_token is not None else None
            return Credentials(s3.access_key_id, s3.secret_access_key.get_secret_value(), token)
        if self._credentials is None:
            import botocore.session

            self._credentials = botocore.session.get_session().get_credentials()
        if self._credentials is None:
            raise InvalidRequestError("the warehouse has no S3 credentials to sign requests with")
        return self._credentials.get_frozen_credentials()
