"""Errors every authenticator raises when a credential is not accepted.

    AuthenticationError          any credential that does not prove an identity (401)
    ├── CredentialExpiredError   a gateway token that was valid but has expired (419 where the
    │                            Iceberg spec allows it)
    ├── UnsupportedBindingError  a correctly signed token bound to a DPoP key (`cnf.jkt`), which
    │                            the gateway does not check (401 saying so)
    └── CredentialFormError      a credential sent in a form no credential has (no `Bearer`
                                 scheme, `<key id>:<secret>` as a bearer token): 401 naming the
                                 expected form (`gateway.authn.credential_forms`)

The message of these errors is always the same generic text: why a credential failed is logged by
the authenticator (at INFO, without key or token material) and never reaches the client. The one
exceptions say only that DPoP-bound tokens are not supported, which the client's own token told
it, and which form a credential must take, chosen by the shape of what was sent (never by a lookup,
so they reveal nothing about which keys exist, and never echoing it).
"""

from __future__ import annotations

GENERIC_MESSAGE = "Not authenticated"


class AuthenticationError(Exception):
    """The presented credential does not authenticate anyone. The message is always generic."""

    def __init__(self) -> None:
        super().__init__(GENERIC_MESSAGE)


class CredentialExpiredError(AuthenticationError):
    """A well-formed, correctly signed credential whose lifetime is over."""


class UnsupportedBindingError(AuthenticationError):
    """A correctly signed token bound to a DPoP key (RFC 9449 `cnf.jkt`): not a bearer token, and
    the gateway does not check DPoP proofs, so it is refused with a message that says so."""


class CredentialFormError(AuthenticationError):
    """A credential whose shape rules it out before any lookup; `hint` (a fixed text from
    `gateway.authn.credential_forms`) names the form expected instead."""

    def __init__(self, hint: str) -> None:
        super().__init__()
        self.hint = hint

    def __str__(self) -> str:
        return f"Not authorized: {self.hint}"
