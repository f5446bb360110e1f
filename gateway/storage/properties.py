"""pyiceberg FileIO and engine properties of a warehouse's object store, from its `S3Settings`."""

from __future__ import annotations

from cedarberg.gateway.config.storage import DEFAULT_REGION, S3Settings


def fileio_properties(s3: S3Settings | None) -> dict[str, str]:
    """pyiceberg FileIO properties for the gateway's own access to a warehouse (secrets included:
    they stay in this process)."""
    if s3 is None:
        return {}
    properties = {"s3.region": s3.region, "client.region": s3.region}
    if s3.endpoint is not None:
        properties["s3.endpoint"] = s3.endpoint
        # pyarrow addresses a custom endpoint path-style unless told otherwise.
        properties["s3.force-virtual-addressing"] = "false" if s3.path_style_access else "true"
    if s3.access_key_id is not None and s3.secret_access_key is not None:
        properties["s3.access-key-id"] = s3.access_key_id
        properties["s3.secret-access-key"] = s3.secret_access_key.get_secret_value()
    if s3.session_token is not None:
        properties["s3.session-token"] = s3.session_token.get_secret_value()
    return properties


def engine_properties(s3: S3Settings | None) -> dict[str, str]:
    """How an engine reaches the warehouse's S3 endpoint (no keys): the spellings of Java's S3FileIO,
    pyiceberg and DuckDB (`s3.path-style-access`, `s3.force-virtual-addressing`)."""
    region = s3.region if s3 is not None else DEFAULT_REGION
    properties = {"s3.region": region, "client.region": region}
    if s3 is not None and s3.endpoint is not None:
        properties["s3.endpoint"] = s3.endpoint
        properties["s3.path-style-access"] = "true" if s3.path_style_access else "false"
        properties["s3.force-virtual-addressing"] = "false" if s3.path_style_access else "true"
    return properties
