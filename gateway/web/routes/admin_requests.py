"""The admin API's request documents and the limits of its requests.

Their own module, apart from the handlers (`admin`): the admin API's OpenAPI document
(`openapi.operations`) describes these models and limits, and must not import the handlers (and
through them the policy engine) to do so.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from cedarberg.gateway.authn.api_keys import MAX_DESCRIPTION_LENGTH, MAX_GROUPS, MAX_NAME_LENGTH
from cedarberg.gateway.authn.principal import AuthMethod
from cedarberg.gateway.config.preview import DEFAULT_DECISIONS

MAX_BODY_BYTES = 64 * 1024
MAX_PAGE_SIZE = 500  # records in one page of a key listing
_LIST_LIMIT = 64  # entries of a list field in an explain request


class AdminRequest(BaseModel):
    """A request document of the admin API: strict (no coercion), closed (no unknown fields),
    frozen."""

    model_config = ConfigDict(strict=True, extra="forbid", frozen=True)


class CreateKeyRequest(AdminRequest):
    principal: str = Field(min_length=1, max_length=MAX_NAME_LENGTH)
    kind: Literal["user", "service"] = "user"
    groups: list[str] = Field(default_factory=list, max_length=MAX_GROUPS)
    expires_at: str | None = Field(None, max_length=64, description="ISO 8601 with a time zone")
    description: str = Field("", max_length=MAX_DESCRIPTION_LENGTH)


class RotateKeyRequest(AdminRequest):
    # Bounded by `api_keys.max_rotation_overlap_seconds` in `rotate_key` (400 past it).
    overlap_seconds: int = Field(0, ge=0, description="seconds the old secret keeps working")


class ExplainResource(AdminRequest):
    type: Literal["catalog", "warehouse", "namespace", "table", "view", "api-key"]
    warehouse: str | None = Field(None, min_length=1, max_length=MAX_NAME_LENGTH)
    namespace: list[str] | None = None
    name: str | None = Field(None, min_length=1, max_length=MAX_NAME_LENGTH)
    id: str | None = Field(None, max_length=64, description="API key id (type api-key)")
    owner: str | None = Field(None, max_length=MAX_NAME_LENGTH, description="API key owner")
    namespace_properties: list[dict[str, str]] | None = Field(
        None, max_length=16, description="Properties of each namespace level; default: the catalog's"
    )
    warehouse_properties: dict[str, str] | None = None


class ExplainContext(AdminRequest):
    update_kinds: list[str] = Field(default_factory=list, max_length=_LIST_LIMIT)
    refs: list[str] = Field(default_factory=list, max_length=_LIST_LIMIT)
    property_keys: list[str] = Field(default_factory=list, max_length=_LIST_LIMIT)
    creates: bool = False


class ExplainRequest(AdminRequest):
    principal: str = Field(min_length=1, max_length=MAX_NAME_LENGTH)
    kind: Literal["user", "service", "anonymous"] = "user"
    groups: list[str] = Field(default_factory=list, max_length=MAX_GROUPS)
    auth_method: str = AuthMethod.API_KEY.value
    client_address: str = Field("127.0.0.1", max_length=64)
    attributes: dict[str, str] = Field(default_factory=dict)
    action: str = Field(min_length=1, max_length=64)
    resource: ExplainResource = ExplainResource(type="catalog")
    context: ExplainContext = ExplainContext()


# -- the policy change preview (routes/policy_preview.py); its body is bounded by the setting
# `authz.preview.max_body_bytes`, its `decisions` by `authz.preview.max_decisions` ------------

_PREVIEW_FILES = 256  # files given or removed, fixtures supplied, in one preview


class PreviewFixture(AdminRequest):
    expected: Literal["ALLOW", "DENY"] = Field(description="the decision the fixture expects")
    name: str = Field(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}\.json$",
        description="its file name: the fixture is tests/EXPECTED/NAME of the candidate set, and "
        "replaces the active directory's fixture of that path",
    )
    fixture: dict[str, Any] = Field(
        description="a request fixture as in policies/tests: principal, action, resource, context, "
        "entities, optional determining_policies"
    )


class PreviewRequest(AdminRequest):
    files: dict[str, str] = Field(
        default_factory=dict,
        max_length=_PREVIEW_FILES,
        description="policy files to replace or add, name: text (schema.cedarschema or NAME.cedar)",
    )
    removed: list[str] = Field(
        default_factory=list,
        max_length=_PREVIEW_FILES,
        description="names of active *.cedar files to leave out",
    )
    fixtures: list[PreviewFixture] = Field(
        default_factory=list, max_length=_PREVIEW_FILES, description="fixtures to run beside the directory's"
    )
    decisions: int | None = Field(
        None,
        ge=0,
        description=f"how many of the newest audited decisions to decide again (default "
        f"{DEFAULT_DECISIONS}; at most authz.preview.max_decisions)",
    )
