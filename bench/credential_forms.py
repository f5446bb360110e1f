"""loadTable with every credential form a client sends (issue 32, §0).

The suite's `load_table` sends the writer's gateway token (`Authorization: Bearer <jwt>`, what
Spark and pyiceberg send after exchanging `credential=` at `POST /v1/oauth/tokens`). These
scenarios send the same request with the other forms the gateway accepts:

- `load_table_api_key`: the writer's API key as the bearer token (pyiceberg's `token=`, DuckDB's
  `TOKEN` secret, as the README documents);
- `load_table_x_api_key`: the same key in `X-Api-Key`;
- `load_table_oidc`: a token from an OIDC issuer the gateway trusts: `Issuer`, a discovery
  document and JWKS on 127.0.0.1 (`tests.support.idp.KeySetServer`) whose RSA key signs one token
  for the subject `bench-oidc` of group `etl` (the writers' group, admitted bare by the issuer's
  `groups_allowed`), valid for `OIDC_TOKEN_SECONDS`.

Each runs at 32 connections on `cedarberg/http-1w`, and each has the target of `load_table`:
at least half the bare aiohttp server's loadTable throughput (`ceiling/bare-aiohttp/load_table`,
which gets the gateway token's request and ignores its header).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

from bench import fixtures
from bench.scenarios import BY_NAME, READ, TABLE, Operation
from tests.support.idp import KeySetServer

BEARER = "Authorization"
API_KEY_HEADER = "X-Api-Key"
WRITER_KEY_ROLE = "writer-key"  # Endpoint.tokens: the writer's API key itself
OIDC_ROLE = "oidc"  # Endpoint.tokens: a token of the bench's OIDC issuer
OIDC_AUDIENCE = "cedarberg-bench"
OIDC_TOKEN_SECONDS = 6 * 3600  # under the gateway's default 24 h limit; a run lasts well under
_KID = "bench"
_LOAD = f"{TABLE}/{fixtures.READ_TABLE}"

OPERATIONS: tuple[Operation, ...] = (
    Operation("load_table_api_key", "loadTable, API key as bearer (c32)", READ, "GET", _LOAD, 32,
              role=WRITER_KEY_ROLE),
    Operation("load_table_x_api_key", "loadTable, API key in X-Api-Key (c32)", READ, "GET", _LOAD, 32,
              role=WRITER_KEY_ROLE, header=API_KEY_HEADER),
    Operation("load_table_oidc", "loadTable, OIDC token (c32)", READ, "GET", _LOAD, 32, role=OIDC_ROLE),
)  # fmt: skip
NAMES = tuple(operation.name for operation in OPERATIONS)
_ALL_BY_NAME = {**BY_NAME, **{operation.name: operation for operation in OPERATIONS}}
# (operation, form) of each loadTable target against the ceiling, the gateway token's included.
FORMS = (
    ("load_table", "gateway token"),
    ("load_table_api_key", "API key as bearer"),
    ("load_table_x_api_key", "API key in X-Api-Key"),
    ("load_table_oidc", "OIDC token"),
)


def operations_for(names: tuple[str, ...]) -> list[Operation]:
    """`bench.scenarios.operations_for`, knowing these operations too."""
    return [_ALL_BY_NAME[name] for name in names]


def credential_header(header: str, credential: str) -> dict[str, str]:
    """The request header carrying `credential`: `Authorization: Bearer ...`, or the raw value
    in any other header (`X-Api-Key`)."""
    if header == BEARER:
        return {BEARER: f"Bearer {credential}"}
    return {header: credential}


@dataclass
class Issuer:
    """The bench's OIDC issuer (see the module docstring)."""

    server: KeySetServer
    key: rsa.RSAPrivateKey
    group: str  # the one group its tokens assert, admitted bare by the gateway

    def gateway_config(self) -> dict[str, Any]:
        """The gateway's `[oidc]` section trusting this issuer."""
        issuer = {"issuer": self.server.issuer, "audiences": [OIDC_AUDIENCE], "alias": "bench"}
        return {"issuers": [{**issuer, "groups_allowed": [self.group]}]}

    def token(self) -> str:
        now = int(time.time())
        claims = {
            "iss": self.server.issuer,
            "aud": OIDC_AUDIENCE,
            "sub": "bench-oidc",
            "groups": [self.group],
            "iat": now,
            "exp": now + OIDC_TOKEN_SECONDS,
        }
        return jwt.encode(claims, self.key, algorithm="RS256", headers={"kid": _KID})


@contextlib.contextmanager
def running_issuer(group: str) -> Iterator[Issuer]:
    """An OIDC issuer on 127.0.0.1 with a fresh RSA key whose tokens assert `group`, stopped on
    exit."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    server = KeySetServer().start()
    public = RSAAlgorithm.to_jwk(key.public_key(), as_dict=True)
    server.keys = [{**public, "kid": _KID, "alg": "RS256", "use": "sig"}]
    try:
        yield Issuer(server, key, group)
    finally:
        server.close()
