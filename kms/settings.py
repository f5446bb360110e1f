"""Settings of the key management layer (a section of the gateway's settings)."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, SecretStr


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class CacheSettings(_Frozen):
    max_entries: int = Field(10_000, ge=0, le=1_000_000, description="Unwrapped data keys kept in memory.")
    max_age_seconds: float = Field(
        300.0, ge=0, le=86_400, description="An unwrapped key is dropped this long after it was unwrapped."
    )
    max_uses: int = Field(100_000, ge=0, description="An unwrapped key is dropped after this many uses.")

    @property
    def enabled(self) -> bool:
        """Whether unwrapped keys are kept at all (any zero bound turns the cache off)."""
        return self.max_entries > 0 and self.max_uses > 0 and self.max_age_seconds > 0


class AwsKmsSettings(_Frozen):
    region: str | None = Field(None, description="AWS region (default: the SDK's configuration).")
    endpoint_url: str | None = Field(None, description="KMS endpoint override (VPC endpoint, tests).")
    access_key_id: SecretStr | None = Field(None, description="Static credentials (default: SDK chain).")
    secret_access_key: SecretStr | None = Field(None, description="Static credentials (default: SDK chain).")


class VaultSettings(_Frozen):
    token: SecretStr | None = Field(None, description="Vault token (or token_file, or VAULT_TOKEN).")
    token_file: Path | None = Field(None, description="File holding the Vault token, re-read on 403.")
    tls: bool = Field(True, description="Talk HTTPS to Vault; false only for a loopback dev server.")
    ca_file: Path | None = Field(None, description="CA bundle that signs Vault's certificate.")
    namespace: str | None = Field(None, description="Vault Enterprise / OpenBao namespace.")


class GcpKmsSettings(_Frozen):
    endpoint: str | None = Field(None, description="API endpoint override host:port (tests).")
    insecure_loopback: bool = Field(
        False, description="Plaintext gRPC to a loopback endpoint without credentials (tests only)."
    )
    credentials_file: Path | None = Field(None, description="Service account JSON (default: ADC).")


class AzureKeyVaultSettings(_Frozen):
    tenant_id: str | None = Field(None, description="Entra tenant for client-secret credentials.")
    client_id: str | None = Field(None, description="Application (client) id.")
    client_secret: SecretStr | None = Field(
        None, description="Client secret (default: DefaultAzureCredential)."
    )
    static_token: SecretStr | None = Field(None, description="A fixed bearer token (tests, sidecars).")
    ca_file: Path | None = Field(None, description="CA bundle for the vault's certificate.")
    verify_challenge_resource: bool = Field(
        True, description="Check that the auth challenge's resource matches the vault's domain."
    )


class KmsSettings(_Frozen):
    kek: str = Field(
        "local://default",
        description="KEK URI new data keys are wrapped under: local://NAME, aws-kms://KEY-ID-OR-ARN, "
        "vault-transit://HOST:PORT/MOUNT/KEY, gcp-kms://projects/P/locations/L/keyRings/R/cryptoKeys/K, "
        "azure-kv://VAULT-HOST/keys/NAME.",
    )
    local_key_dir: Path | None = Field(
        None, description="Directory of local:// key files (default: data_dir/kms)."
    )
    timeout_seconds: float = Field(5.0, gt=0, le=120, description="Timeout of one KMS call.")
    cache: CacheSettings = Field(default_factory=CacheSettings, description="Unwrapped data key cache.")
    aws: AwsKmsSettings = Field(default_factory=AwsKmsSettings, description="aws-kms:// provider.")
    vault: VaultSettings = Field(default_factory=VaultSettings, description="vault-transit:// provider.")
    gcp: GcpKmsSettings = Field(default_factory=GcpKmsSettings, description="gcp-kms:// provider.")
    azure: AzureKeyVaultSettings = Field(
        default_factory=AzureKeyVaultSettings, description="azure-kv:// provider."
    )
