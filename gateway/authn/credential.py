"""What a verified bearer token stays valid on, beyond its own claims.

A verification is remembered (`gateway.authn.token_cache`, request plans in `gateway.web.replay`),
so what the verification relied on must be re-checkable in O(1) on every later use:

- `KeyLease`: the signing key the token was verified with. The key set that holds it retires the
  lease when a refresh drops the key (or the issuer is closed), and every lease of a key set reads
  as stale once the set is due for a refresh (`Freshness`), so a remembered verification never
  outlives its key nor skips the refresh that would have removed it.
- `Proof`: the lease plus the client-certificate binding (RFC 8705 `cnf.x5t#S256`) the token
  demands, so a remembered verification is used only on a connection presenting that certificate.

Nothing here does I/O or knows about HTTP; `gateway.authn.jwks` owns leases, `gateway.authn.oidc`
builds proofs, the caches check them.
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Callable
from dataclasses import dataclass


class Freshness:
    """Until when (monotonic seconds) one issuer's key set may be used without a refresh."""

    __slots__ = ("until",)

    def __init__(self) -> None:
        self.until = 0.0

    def renew(self, ttl: float) -> None:
        self.until = time.monotonic() + ttl


class KeyLease:
    """One signing key's standing: current while its key set is fresh and still holds it."""

    __slots__ = ("_freshness", "_retired")

    def __init__(self, freshness: Freshness) -> None:
        self._freshness = freshness
        self._retired = False

    def retire(self) -> None:
        """The key left its issuer's key set: every verification made with it ends now."""
        self._retired = True

    @property
    def retired(self) -> bool:
        return self._retired

    @property
    def current(self) -> bool:
        """Whether a verification made with this key may still be relied on without verifying
        again (False once retired, and while the key set is due for a refresh)."""
        return not self._retired and time.monotonic() < self._freshness.until


# The SHA-256 of the DER client certificate this connection's TLS handshake verified, or None;
# called only when a token is bound to a certificate (computing it costs a hash).
PeerCertificate = Callable[[], bytes | None]


def no_peer_certificate() -> bytes | None:
    """A `PeerCertificate` for callers without a connection (no certificate)."""
    return None


def certificate_matches(required: bytes, peer: PeerCertificate) -> bool:
    """Whether the connection's verified client certificate has the thumbprint `required`
    (compared in constant time)."""
    presented = peer()
    return presented is not None and hmac.compare_digest(required, presented)


@dataclass(frozen=True, slots=True)
class Proof:
    """What a token's principal stays valid on: its signing key and, if the token is bound to a
    client certificate (`cnf.x5t#S256`), that certificate's SHA-256 thumbprint."""

    lease: KeyLease
    certificate_sha256: bytes | None = None

    def holds(self, peer: PeerCertificate) -> bool:
        """Whether a remembered verification may be used for a request whose connection presents
        `peer` (O(1): a flag, a clock read and, for bound tokens, one comparison)."""
        if not self.lease.current:
            return False
        return self.certificate_sha256 is None or certificate_matches(self.certificate_sha256, peer)
