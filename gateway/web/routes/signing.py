"""POST .../tables/{table}/sign (signRequest): sign an engine's S3 request for the table's files.

The pipeline has allowed signRequest (read) on the table before this runs. The request is signed
only if it stays inside the table's location (`sign_scope.classify`) and, when it writes, Cedar
also allows writeTableData (`decide_file_access`); a caller whose read is restricted to some columns
or rows is signed for only if its client is trusted (readRestrictedData, decided for each signature).
Every refusal is a 403 ForbiddenException, audited with the method, path and reason (never the
query, which may carry signatures). A write is signed only once its decisions are durably recorded
(`AuditLog.durable`; 503 otherwise).
"""

from __future__ import annotations

from urllib.parse import urlsplit

import orjson
from aiohttp import web
from pydantic import BaseModel, ConfigDict, Field

from cedarberg.catalog import requests as req
from cedarberg.catalog.errors import InvalidRequestError
from cedarberg.gateway.storage.s3_scope import S3Scope
from cedarberg.gateway.storage.sign_scope import S3Request, classify
from cedarberg.gateway.web import http, verdicts
from cedarberg.gateway.web.errors import ForbiddenError
from cedarberg.gateway.web.file_access import RESTRICTED, decide_file_access, require_confined, table_resource
from cedarberg.gateway.web.keys import security, services, storage


class RemoteSignRequest(BaseModel):
    """The spec's RemoteSignRequest."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    region: str
    uri: str = Field(min_length=1, max_length=16_384)
    method: str = Field(min_length=1, max_length=16)
    headers: dict[str, list[str]]
    properties: dict[str, str] | None = None
    body: str | None = None
    provider: str | None = None


async def sign_request(request: web.Request) -> web.Response:
    identifier = http.table(request)
    svc = services(request)
    name = svc.ctx.warehouse(http.prefix(request)).name
    warehouse = storage(request).s3_warehouse(name)
    if warehouse is None:
        raise InvalidRequestError(f"warehouse {name!r} is not an S3 warehouse: there is nothing to sign")
    sign = req.parse(RemoteSignRequest, await http.json_body(request))
    if sign.provider not in (None, "s3"):
        raise InvalidRequestError("only S3 requests are signed")
    _etag, loaded = await svc.tables.load(http.prefix(request), identifier, "refs", None)
    metadata = orjson.loads(loaded or b"{}")["metadata"]
    scope = S3Scope.of(metadata["location"])
    verdict = classify(warehouse.endpoint, scope, S3Request(sign.method, sign.uri, sign.headers, sign.body))
    table = await table_resource(request, identifier, fresh=verdict.write)
    if verdict.refused is not None:
        _refuse(request, str(table), sign, verdict.refused)
    await require_confined(request, "signRequest", table, metadata)
    # Every signature goes through the one choke point, reads included.
    access = decide_file_access(request, table, "signRequest", want_write=verdict.write)
    if not access.read:
        reason = RESTRICTED if access.restricted else "reading the table's files is not allowed"
        _refuse(request, str(table), sign, reason)
    if verdict.write and not access.write:
        _refuse(request, str(table), sign, "writing the table's files needs writeTableData")
    if verdict.write:
        # A signed write changes the warehouse: handed out only once the decision allowing it is
        # on record (else 503); signed reads follow `audit.reads_when_failing` like every read.
        await security(request).audit.durable()
    headers = await warehouse.signer.sign(sign.method, sign.uri, sign.headers, verdict.payload_sha256)
    return http.json_response(orjson.dumps({"uri": sign.uri, "headers": headers}))


def _refuse(request: web.Request, table: str, sign: RemoteSignRequest, reason: str) -> None:
    detail = {"method": sign.method[:16], "path": urlsplit(sign.uri).path[:1024], "reason": reason}
    verdicts.refuse(request, "signRequest", table, detail)
    raise ForbiddenError(f"request not signed: {reason}")
