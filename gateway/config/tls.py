"""TLS of the listening socket (`[tls]`); `gateway.tls` builds the SSL context from it."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, model_validator

from cedarberg.gateway.config.base import FrozenSettings


class TlsSettings(FrozenSettings):
    """TLS of the listening socket. Without ``cert_file`` the gateway speaks plain HTTP, which
    `check_plain_http_allowed` permits only on loopback or when ``allow_plain_http`` is set."""

    cert_file: Path | None = Field(
        None, description="PEM server certificate chain (leaf first). Setting it turns TLS on."
    )
    key_file: Path | None = Field(None, description="PEM private key of the server certificate.")
    key_password: SecretStr | None = Field(None, description="Password of an encrypted key_file.")
    client_ca_file: Path | None = Field(
        None, description="PEM CA bundle that client certificates are verified against (mTLS)."
    )
    require_client_cert: bool = Field(
        False, description="Refuse clients without a certificate that verifies (needs client_ca_file)."
    )
    allow_plain_http: bool = Field(
        False, description="Serve plain HTTP on a non-loopback address (UNSAFE: credentials in clear)."
    )
    minimum_version: Literal["1.2", "1.3"] = Field("1.2", description="Lowest TLS version accepted.")

    @model_validator(mode="after")
    def _consistent(self) -> TlsSettings:
        if (self.cert_file is None) != (self.key_file is None):
            raise ValueError("tls: cert_file and key_file go together")
        if self.client_ca_file is not None and self.cert_file is None:
            raise ValueError("tls: client_ca_file needs cert_file/key_file (mTLS runs over TLS)")
        if self.require_client_cert and self.client_ca_file is None:
            raise ValueError("tls: require_client_cert needs client_ca_file")
        return self

    @property
    def enabled(self) -> bool:
        return self.cert_file is not None
