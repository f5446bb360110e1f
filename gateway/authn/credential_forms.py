"""The forms a credential must take, and the messages that name them when one is sent wrong.

A client that sends a credential in the wrong place or shape gets a message naming the expected
form instead of a bare "Not authorized". The messages are fixed texts chosen by the *shape* of
what was sent (its scheme, a `:`, the `cbk_` key layout): nothing here looks anything up, so a
message is the same whether or not a key exists, and none echoes what was sent.

Forms (docs/engines.md, "Credentials and the catalog URI"):

- on catalog and admin routes: `Authorization: Bearer <token>`, where the token is an API key
  `cbk_<key id>_<secret>`, an access token from `POST /v1/oauth/tokens`, or a token from a
  configured OIDC issuer;
- at `POST /v1/oauth/tokens` (client credentials): client id = the key id, client secret = the
  secret, which engines take as `credential=<key id>:<secret>`. The whole key given as the client
  secret without a client id (`credential=cbk_...`, which Iceberg's clients send that way) is
  accepted too: it is the same secret material in one piece (`split_whole_key`).
"""

from __future__ import annotations

from cedarberg.gateway.authn.key_format import MalformedKeyError, parse_api_key, parse_parts

BEARER_FORM = (
    "send 'Authorization: Bearer <token>', where the token is an API key (cbk_<key id>_<secret>), "
    "an access token from POST /v1/oauth/tokens or a token from a configured OIDC issuer"
)
# A client credential sent as a bearer token: Spark's and pyiceberg's `credential` goes elsewhere.
CLIENT_CREDENTIAL_AS_BEARER = (
    "'<key id>:<secret>' is a client credential: exchange it at POST /v1/oauth/tokens "
    "(engines: credential=<key id>:<secret>), or " + BEARER_FORM.removeprefix("send ")
)
CLIENT_CREDENTIAL_FORM = (
    "the credential is '<key id>:<secret>': the API key cbk_<key id>_<secret> splits into its "
    "16-character id and the 43-character secret after the next '_' (the whole key as the client "
    "secret, without a client id, is accepted too)"
)
MISSING_CLIENT_CREDENTIALS = "client_id and client_secret are required: " + CLIENT_CREDENTIAL_FORM
MALFORMED_CLIENT_CREDENTIALS = "Client authentication failed: " + CLIENT_CREDENTIAL_FORM

_MAX_INSPECTED = 8 * 1024  # longer headers are not worth a hint (and are refused anyway)


def authorization_hint(header: str) -> str | None:
    """The message for an `Authorization` header that is not `Bearer <token>` (a raw key, `Basic`,
    another scheme, an empty bearer), or None when it has the bearer form."""
    scheme, _, value = header.strip().partition(" ")
    if scheme.lower() == "bearer" and value.strip():
        return None
    if scheme.lower() == "bearer":
        return "the bearer token is empty: " + BEARER_FORM
    if scheme.lower() == "basic":
        return f"HTTP Basic credentials are taken only by POST /v1/oauth/tokens: {BEARER_FORM}"
    return f"the Authorization header has no bearer token: {BEARER_FORM}"


def bearer_hint(token: str) -> str | None:
    """The message for a bearer token that cannot be a token by its shape (a `<key id>:<secret>`
    client credential), or None: tokens of a plausible shape fail with the generic message."""
    if len(token) > _MAX_INSPECTED or ":" not in token:
        return None  # API keys, JWTs and opaque tokens never contain ':'
    return CLIENT_CREDENTIAL_AS_BEARER


def split_whole_key(secret: str) -> tuple[str, str] | None:
    """(key id, secret) of a whole API key given as an OAuth2 client secret, or None if `secret`
    is not shaped as one."""
    try:
        key = parse_api_key(secret)
    except MalformedKeyError:
        return None
    return key.key_id, key.secret


def well_formed_parts(key_id: str, secret: str) -> bool:
    """Whether (client id, client secret) has the shape of an API key's id and secret (no lookup)."""
    try:
        parse_parts(key_id, secret)
    except MalformedKeyError:
        return False
    return True
