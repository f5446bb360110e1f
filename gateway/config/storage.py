"""Per-warehouse object-store settings: how the gateway reaches an S3 warehouse (`[warehouses.X.s3]`)
and how it vends short-lived credentials for it (`[warehouses.X.vending]`); `gateway.storage`
uses them.

The warehouse's own keys serve the gateway (metadata files, purge, scan planning) and remote signing;
engines never see them. Vended credentials come from STS AssumeRole with a session policy that
narrows them to one table's location.
"""

from __future__ import annotations

from urllib.parse import urlsplit

from pydantic import Field, SecretStr, field_validator, model_validator

from cedarberg.gateway.config.base import FrozenSettings

DEFAULT_REGION = "us-east-1"


def _http_url(value: str | None) -> str | None:
    if value is None:
        return None
    parts = urlsplit(value)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
        raise ValueError("must be an http:// or https:// URL without query or fragment")
    if parts.path not in ("", "/"):
        raise ValueError("must be the endpoint's root URL (no path)")
    return f"{parts.scheme}://{parts.netloc}"


class S3Settings(FrozenSettings):
    """How the gateway reaches an s3:// warehouse. Without keys, the AWS default credential chain
    (environment, instance profile) of the gateway process is used."""

    endpoint: str | None = Field(
        None, description="URL of an S3-compatible server (MinIO, Ceph...); unset: AWS S3 of `region`."
    )
    region: str = Field(DEFAULT_REGION, min_length=1, max_length=64, description="Region of the bucket.")
    access_key_id: str | None = Field(None, min_length=1, description="Access key id of the gateway.")
    secret_access_key: SecretStr | None = Field(None, description="Secret access key of the gateway.")
    session_token: SecretStr | None = Field(None, description="Session token, for temporary keys.")
    path_style_access: bool = Field(
        False,
        description="Address buckets as `endpoint/bucket/key` rather than `bucket.endpoint/key` "
        "(most S3-compatible servers need true).",
    )

    @field_validator("endpoint")
    @classmethod
    def _endpoint_url(cls, value: str | None) -> str | None:
        return _http_url(value)

    @model_validator(mode="after")
    def _keys_in_pairs(self) -> S3Settings:
        if (self.access_key_id is None) != (self.secret_access_key is None):
            raise ValueError("access_key_id and secret_access_key go together")
        if self.session_token is not None and self.access_key_id is None:
            raise ValueError("session_token needs access_key_id and secret_access_key")
        return self


class VendingSettings(FrozenSettings):
    """Credential vending: the role assumed for engines' short-lived, table-scoped credentials."""

    role_arn: str = Field(
        pattern=r"^arn:aws[a-z-]*:iam::[0-9]{12}:role/[A-Za-z0-9_+=,.@/-]{1,512}$",
        description="Role assumed for vended credentials; its own policy must allow what the "
        "session policies grant (the session policy only narrows it to one table).",
    )
    duration_seconds: int = Field(
        3600, ge=900, le=43_200, description="Lifetime of vended credentials (STS allows 900..43200)."
    )
    sts_endpoint: str | None = Field(
        None,
        description="STS endpoint URL; unset: the warehouse's s3.endpoint when it has one "
        "(S3-compatible servers such as MinIO serve STS there), else AWS STS of the region.",
    )
    external_id: str | None = Field(
        None, min_length=2, max_length=1224, description="ExternalId the role's trust policy requires."
    )

    @field_validator("sts_endpoint")
    @classmethod
    def _sts_url(cls, value: str | None) -> str | None:
        return _http_url(value)
