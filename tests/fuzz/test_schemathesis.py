"""Property-based fuzzing of the REST catalog API with Schemathesis, against a real gateway process.

Schemathesis generates requests for every operation of the Iceberg REST OpenAPI spec 1.11.0
(``rest-catalog-open-api-1.11.0.yaml`` beside this module, a verbatim copy; one quirk is corrected
in memory, see `load_spec`): the spec's examples, boundary cases ("coverage" phase) and random
valid and invalid requests ("fuzzing" phase: wrong types, missing fields, malformed parameters and
headers). Each goes to a gateway set up as in production (TLS, no anonymous access:
``tests.support.secure.SecureGateway``) with an admin API key, so that it passes authentication and
authorization and reaches the catalog code. Each path parameter is either what Schemathesis
generated or the name of a seeded object (warehouse ``default``, namespaces ``fz`` and ``fz.sub``,
table ``fz.t``, view ``fz.v``), so that requests reach existing objects as well as missing ones.
Destructive operations (drops, renames, commits) run on the seeds too: the seeds are restored
before each operation.

Checks (`CHECKS`), on every response:
- never a 5xx (not_a_server_error), the reason this module exists;
- every error but the token endpoint's is an Iceberg ``ErrorModel`` whose ``code`` is the status
  (`error_model`, ours);
- the status is one the spec documents for the operation, the body and headers conform to the
  spec's response schema, the content type is the documented one;
- requests that violate the spec's schema are refused, so are requests missing a required header;
- operations that declare authentication refuse requests without credentials or with bad ones;
- an undocumented method is a 405 with an ``Allow`` header that lists the route's methods.
Known differences from the spec that the gateway makes on purpose are dropped in `filter_failure`.

Not checked, and why:
- positive_data_acceptance (every schema-valid request is accepted): the spec's request schemas
  are far looser than the Iceberg semantics the gateway enforces. Empty names, snapshot ids and
  plan tasks that do not exist, metadata locations outside any warehouse are "schema-valid" and
  rightly refused with a 400 or 404.
- use_after_free, ensure_resource_availability, object_level_authorization: they judge sequences
  of requests (and several principals) made by Schemathesis' stateful phase, which its pytest
  integration does not run; authorization has its own suites (tests/gateway/test_authz.py).
- max_response_time: no latency budget is reproducible on shared CI cores (bench/ measures them).

The spec types a schema's field types and a transform as plain strings, so Schemathesis seldom
reaches what the gateway parses hardest (nested types, `decimal(P,S)`, `fixed[N]`, `bucket[N]`):
tests/fuzz/test_nested_types.py draws those with strategies of its own, under the same checks.

The run is bounded and reproducible: a fixed seed, derandomized generation, `MAX_EXAMPLES`
examples per operation in the fuzzing phase, no example database (Hypothesis' ``.hypothesis``
directory, git-ignored, only ever holds its own caches), a timeout per operation, and a total
budget (`TOTAL_BUDGET_SECONDS`): an operation that would start after it fails at once.
"""

from __future__ import annotations

import itertools
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote

import hypothesis
import pytest
import requests
import schemathesis
import yaml
from hypothesis import strategies as st
from schemathesis.checks import not_a_server_error
from schemathesis.core.failures import AcceptedNegativeData
from schemathesis.core.parameters import ParameterLocation
from schemathesis.openapi.checks import UndefinedStatusCode
from schemathesis.specs.openapi.checks import (
    allow_header_conformance,
    content_type_conformance,
    ignored_auth,
    missing_required_header,
    negative_data_rejection,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
    unsupported_method,
)

from tests.support.secure import GENEROUS_RATE_LIMITS, SecureGateway
from tests.support.tls import TestPki

SPEC = Path(__file__).with_name("rest-catalog-open-api-1.11.0.yaml")
HTTP_TIMEOUT = 30
TOKEN_PATH = "/v1/oauth/tokens"
ERROR_MODEL = "#/components/schemas/ErrorModel"
ERROR_RESPONSE = "#/components/schemas/IcebergErrorResponse"


def load_spec() -> dict[str, Any]:
    """The spec, with the one quirk that would fail every conforming server corrected.

    The view operations' error responses refer to ``ErrorModel`` itself instead of its envelope
    ``IcebergErrorResponse`` (``{"error": ErrorModel}``), though their own examples (e.g.
    ``NoSuchViewError``) and every other operation's errors use the envelope, as the Java reference
    implementation answers. They are pointed at the envelope."""
    document: dict[str, Any] = yaml.safe_load(SPEC.read_text())
    for path in document["paths"].values():
        for operation in path.values():
            if not isinstance(operation, dict):
                continue  # the path's shared `parameters`
            for response in operation.get("responses", {}).values():
                media = response.get("content", {}).get("application/json", {})
                if media.get("schema") == {"$ref": ERROR_MODEL}:
                    media["schema"] = {"$ref": ERROR_RESPONSE}
    return document


SEED = 1717
# About 50 s for the whole module on one idle core; the slowest operations (commits, whose
# coverage phase has the most boundary cases) take a few seconds each.
MAX_EXAMPLES = 50
OPERATION_TIMEOUT_SECONDS = 90
TOTAL_BUDGET_SECONDS = 150

CONFIG = schemathesis.Config.from_dict(
    {
        "seed": SEED,
        "generation": {"max-examples": MAX_EXAMPLES, "deterministic": True, "database": "none"},
        # Generation must not depend on answers (they hold fresh UUIDs and timestamps): no inputs
        # taken from responses, no learning from 4xx messages.
        "phases": {
            "fuzzing": {"extra-data-sources": {"responses": False}, "error-feedback": {"enabled": False}}
        },
    }
)
schema = schemathesis.openapi.from_dict(load_spec(), config=CONFIG)

NAMESPACE = "fz"
TABLE = "t"
VIEW = "v"
CHILD = "sub"
SEP = "\x1f"  # the separator of namespace levels in a path
SEEDED: dict[str, list[str]] = {
    "prefix": ["default"],
    "namespace": [NAMESPACE, f"{NAMESPACE}{SEP}{CHILD}"],
    "table": [TABLE],
    "view": [VIEW],
}


@schema.hook
def flatmap_path_parameters(context: Any, path_parameters: dict[str, Any] | None) -> Any:
    """Each path parameter: as generated, or the name of a seeded object."""
    if path_parameters is None:
        return st.none()  # an operation without path parameters
    choices = {
        key: st.sampled_from([value, *SEEDED[key]]) if key in SEEDED else st.just(value)
        for key, value in path_parameters.items()
    }
    return st.fixed_dictionaries(choices)


@schema.hook
def filter_failure(context: Any, failure: Any, case: Any, response: Any) -> bool:
    """Keep every failure but those of known, deliberate differences from the spec.

    - An unknown warehouse prefix is a 404 ``NoSuchWarehouseException`` on every route under
      ``/v1/{prefix}`` (the spec's own ``NoSuchWarehouseError`` example), but the spec lists no 404
      among the answers of createNamespace and signRequest.
    - A request is served though one of its headers violates the spec's schema, when that header
      is one the gateway does not read for this request (see `ignored_headers_only`).
    - updateProperties is served when a key is listed twice in ``removals`` (the spec says
      ``uniqueItems``): removing a key twice removes it, as the reference implementation does
      (it reads ``removals`` as a list).
    - A table or view commit without ``requirements`` or ``updates`` (the spec requires them) is
      served with none, as the reference implementation reads it (``UpdateTableRequestParser``:
      both optional when parsing, both always written)."""
    if isinstance(failure, UndefinedStatusCode) and response.status_code == 404:
        return error_type(response) != "NoSuchWarehouseException"
    if isinstance(failure, AcceptedNegativeData):
        if operation_id(case) == "updateProperties" and DUPLICATE_REMOVALS in failure.message:
            return False
        if operation_id(case) in COMMITS and omits_changes(case) and MISSING_FIELD in failure.message:
            return False
        return not ignored_headers_only(case)
    return True


DUPLICATE_REMOVALS = "violates `uniqueItems` at /properties/removals"
MISSING_FIELD = "violates `required`"
COMMITS = {"updateTable", "replaceView"}


def omits_changes(case: Any) -> bool:
    """Whether the case's body is an object lacking ``requirements`` or ``updates``."""
    return isinstance(case.body, dict) and not {"requirements", "updates"} <= set(case.body)


def operation_id(case: Any) -> str | None:
    return case.operation.definition.raw.get("operationId")


# Operations that declare an Idempotency-Key though they change nothing in the catalog: the gateway
# reads (and validates) the key only where it records a mutation's outcome to replay it.
KEYLESS_OPERATIONS = {"planTableScan", "cancelPlanning", "fetchScanTasks", "signRequest"}


def ignored_headers_only(case: Any) -> bool:
    """Whether a negative case's schema violations can all be in headers the gateway ignores.

    - ``X-Iceberg-Access-Delegation`` is declared an enum of one mechanism, yet described (and
      exemplified) as a comma-separated list of which "the server may choose to supply access via
      any or none": the gateway ignores mechanisms it does not know, as the reference does.
    - ``Idempotency-Key`` of a `KEYLESS_OPERATIONS` operation."""
    meta = case.meta
    if meta is None:
        return False
    negated = {location for location in ParameterLocation if meta.is_negative_at(location)}
    if negated != {ParameterLocation.HEADER}:
        return False
    if operation_id(case) in KEYLESS_OPERATIONS:
        return True
    key = (case.headers or {}).get("Idempotency-Key")
    return "X-Iceberg-Access-Delegation" in (case.headers or {}) and (key is None or well_formed_key(key))


def well_formed_key(key: Any) -> bool:
    """A UUID in its 36-character form, as the spec's Idempotency-Key schema requires."""
    try:
        return isinstance(key, str) and len(key) == 36 and uuid.UUID(key) is not None
    except ValueError:
        return False


def error_type(response: Any) -> str | None:
    try:
        document = response.json()
    except ValueError:
        return None
    error = document.get("error") if isinstance(document, dict) else None
    return error.get("type") if isinstance(error, dict) else None


def error_model(ctx: Any, response: Any, case: Any) -> bool | None:
    """An error answer's body is ``{"error": {"message", "type", "code"}}``, ``code`` its status.

    Exempt: HEAD answers, which have no body, and the OAuth token endpoint, whose errors the spec
    defines as RFC 6749 ``{"error", "error_description"}`` (response_schema_conformance checks them)."""
    if response.status_code < 400 or case.method.upper() == "HEAD" or case.path == TOKEN_PATH:
        return None
    document = response.json()
    assert isinstance(document, dict), f"not a JSON object: {response.text[:200]}"
    assert set(document) == {"error"}, f"not an IcebergErrorResponse: {sorted(document)}"
    error = document["error"]
    assert isinstance(error, dict), f"error is not an object: {error!r}"
    assert set(error) <= {"message", "type", "code", "stack"}, f"unexpected fields: {sorted(error)}"
    assert isinstance(error.get("message"), str), f"no message: {error!r}"
    assert error["message"], "empty message"
    assert isinstance(error.get("type"), str), f"no type: {error!r}"
    assert error["type"], "empty type"
    assert error.get("code") == response.status_code, f"code {error.get('code')!r} != {response.status_code}"
    return True


_KEYS = itertools.count(1)


def fresh_idempotency_key(case: Any) -> None:
    """Give a request a key of its own where Schemathesis put a well-formed one.

    Schemathesis sends the spec's example key with every operation, but the spec requires a new key
    per logical operation ("no reuse across different operations"), and the gateway answers a key
    reused for another operation with 422 rather than replaying an answer to a different request.
    Malformed keys are left as generated (the gateway must refuse them with a 400)."""
    headers = case.headers or {}
    if well_formed_key(headers.get("Idempotency-Key")):
        headers["Idempotency-Key"] = str(uuid.UUID(int=(0x7 << 76) | next(_KEYS)))


SCHEMA = {
    "type": "struct",
    "schema-id": 0,
    "fields": [{"id": 1, "name": "id", "type": "long", "required": False}],
}
VIEW_BODY = {
    "name": VIEW,
    "schema": SCHEMA,
    "view-version": {
        "version-id": 1,
        "timestamp-ms": 1_700_000_000_000,
        "schema-id": 0,
        "summary": {"engine-name": "fuzz"},
        "representations": [{"type": "sql", "sql": "SELECT 1 AS id", "dialect": "spark"}],
        "default-namespace": [NAMESPACE],
    },
    "properties": {},
}


@pytest.fixture(scope="module")
def fuzz_gateway(tmp_path_factory: pytest.TempPathFactory, session_pki: TestPki) -> Iterator[SecureGateway]:
    # Schemathesis' ignored_auth check re-sends requests without credentials and with invalid ones:
    # far more failed authentications than the strict default allows one address.
    config = {"rate_limits": {**GENEROUS_RATE_LIMITS, "auth_failures_per_address": "1000000/minute"}}
    with SecureGateway(tmp_path_factory.mktemp("fuzz"), pki=session_pki, config=config) as gw:
        assert gw.prefix == SEEDED["prefix"][0]
        yield gw


@pytest.fixture(scope="module")
def transport(fuzz_gateway: SecureGateway) -> Iterator[requests.Session]:
    """One connection pool for all requests; it sends no credentials of its own."""
    with requests.Session() as session:
        session.verify = str(fuzz_gateway.ca_cert)
        yield session


def _exists(admin: requests.Session, url: str) -> bool:
    status = admin.head(url, timeout=HTTP_TIMEOUT).status_code
    assert status in (200, 204, 404), f"HEAD {url}: {status}"
    return status != 404


def _create(admin: requests.Session, url: str, body: dict[str, Any]) -> None:
    answer = admin.post(url, json=body, timeout=HTTP_TIMEOUT)
    assert answer.status_code == 200, f"POST {url}: {answer.status_code} {answer.text}"


@pytest.fixture
def seeded(fuzz_gateway: SecureGateway) -> None:
    """(Re-)create the seeds before each operation's run: the previous operation may have dropped
    or renamed them."""
    admin = fuzz_gateway.admin
    namespaces = fuzz_gateway.catalog_url("namespaces")
    ns = f"{namespaces}/{quote(NAMESPACE, safe='')}"
    if not _exists(admin, ns):
        _create(admin, namespaces, {"namespace": [NAMESPACE]})
    if not _exists(admin, f"{namespaces}/{quote(NAMESPACE + SEP + CHILD, safe='')}"):
        _create(admin, namespaces, {"namespace": [NAMESPACE, CHILD]})
    if not _exists(admin, f"{ns}/tables/{TABLE}"):
        _create(admin, f"{ns}/tables", {"name": TABLE, "schema": SCHEMA})
    if not _exists(admin, f"{ns}/views/{VIEW}"):
        _create(admin, f"{ns}/views", VIEW_BODY)


@pytest.fixture(scope="module")
def started() -> float:
    return time.monotonic()


@pytest.fixture
def within_budget(started: float) -> None:
    """Bound the whole module: with the per-operation timeout, it ends within
    TOTAL_BUDGET_SECONDS + OPERATION_TIMEOUT_SECONDS."""
    spent = time.monotonic() - started
    if spent > TOTAL_BUDGET_SECONDS:
        pytest.fail(
            f"the fuzzing budget of {TOTAL_BUDGET_SECONDS} s is spent ({spent:.0f} s): lower MAX_EXAMPLES"
        )


CHECKS = [
    not_a_server_error,
    error_model,
    status_code_conformance,
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    negative_data_rejection,
    missing_required_header,
    ignored_auth,
    unsupported_method,
    allow_header_conformance,
]


@pytest.mark.timeout(OPERATION_TIMEOUT_SECONDS)
@schema.parametrize()
@hypothesis.settings(
    deadline=None,
    # `seeded` runs once per operation, not per example, on purpose: it only restores the seeds.
    suppress_health_check=[hypothesis.HealthCheck.function_scoped_fixture],
)
def test_api(
    case: Any, fuzz_gateway: SecureGateway, transport: requests.Session, within_budget: None, seeded: None
) -> None:
    fresh_idempotency_key(case)
    case.call_and_validate(
        base_url=fuzz_gateway.url,
        session=transport,
        headers={"Authorization": f"Bearer {fuzz_gateway.admin_key}"},
        checks=CHECKS,
        timeout=HTTP_TIMEOUT,
        verify=str(fuzz_gateway.ca_cert),
    )
