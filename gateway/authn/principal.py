"""The one identity type every authenticator produces and every policy decision consumes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum


class AuthMethod(StrEnum):
    """How a principal proved its identity (policies may require a particular one)."""

    JWT = "jwt"  # a token from a configured OIDC issuer
    GATEWAY_TOKEN = "gateway-token"  # noqa: S105 - a method name: a token the gateway issued
    API_KEY = "api-key"  # an API key presented directly
    MTLS = "mtls"  # a verified client certificate alone
    ANONYMOUS = "anonymous"  # only when explicitly configured


class PrincipalKind(StrEnum):
    USER = "user"
    SERVICE = "service"
    ANONYMOUS = "anonymous"


@dataclass(frozen=True, slots=True)
class Principal:
    """An authenticated caller.

    `id` is unique within its kind; `groups` drive the default policies; `attributes` carry extra
    claims a policy may use (e.g. the verified client-certificate subject under `tls_subject`).
    `key_generation` is the generation of the API key (`attributes["api_key_id"]`) that proved the
    principal, directly or through a gateway token; None for other methods. A gateway token of an
    older generation than its key's current one was issued before a rotation or revocation and
    is refused.
    """

    id: str
    kind: PrincipalKind
    groups: frozenset[str]
    auth_method: AuthMethod
    attributes: Mapping[str, str] = field(default_factory=dict)
    key_generation: int | None = None
