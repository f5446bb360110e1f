"""`[warehouses.X.s3]` and `[warehouses.X.vending]`: validation, secrets kept out of repr, and the
FileIO properties the gateway reaches the warehouse with."""

from __future__ import annotations

import pytest

from cedarberg.gateway.config.settings import SettingsError, load_settings
from cedarberg.gateway.storage.properties import fileio_properties

BASE = "CEDARBERG_WAREHOUSES__LAKE__"


def test_s3_warehouse_with_keys_and_vending() -> None:
    loaded = load_settings(
        None,
        {
            f"{BASE}LOCATION": "s3://bucket/lake",
            f"{BASE}S3__ENDPOINT": "http://127.0.0.1:9000/",
            f"{BASE}S3__ACCESS_KEY_ID": "AKIAEXAMPLE",
            f"{BASE}S3__SECRET_ACCESS_KEY": "very-secret-value",
            f"{BASE}S3__PATH_STYLE_ACCESS": "true",
            f"{BASE}VENDING__ROLE_ARN": "arn:aws:iam::123456789012:role/vend",
            "CEDARBERG_DEFAULT_WAREHOUSE": "lake",
        },
        {},
    )
    lake = loaded.warehouses["lake"]
    assert lake.s3 is not None
    assert lake.vending is not None
    assert lake.s3.endpoint == "http://127.0.0.1:9000"
    assert lake.vending.duration_seconds == 3600
    assert "very-secret-value" not in repr(loaded)
    assert fileio_properties(lake.s3) == {
        "s3.region": "us-east-1",
        "client.region": "us-east-1",
        "s3.endpoint": "http://127.0.0.1:9000",
        "s3.force-virtual-addressing": "false",
        "s3.access-key-id": "AKIAEXAMPLE",
        "s3.secret-access-key": "very-secret-value",
    }


@pytest.mark.parametrize(
    ("env", "named"),
    [
        ({"LOCATION": "file:///tmp/lake", "S3__REGION": "eu-west-1"}, "warehouses.lake"),
        ({"LOCATION": "s3://b/lake", "S3__ENDPOINT": "ftp://host"}, "warehouses.lake.s3.endpoint"),
        ({"LOCATION": "s3://b/lake", "S3__ENDPOINT": "http://host/path"}, "warehouses.lake.s3.endpoint"),
        ({"LOCATION": "s3://b/lake", "S3__ACCESS_KEY_ID": "AKIA"}, "warehouses.lake.s3"),
        ({"LOCATION": "s3://b/lake", "VENDING__ROLE_ARN": "role/vend"}, "warehouses.lake.vending.role_arn"),
        (
            {
                "LOCATION": "s3://b/lake",
                "VENDING__ROLE_ARN": "arn:aws:iam::123456789012:role/v",
                "VENDING__DURATION_SECONDS": "600",
            },
            "warehouses.lake.vending.duration_seconds",
        ),
    ],
)
def test_bad_storage_settings_name_the_setting(env: dict[str, str], named: str) -> None:
    environ = {f"{BASE}{k}": v for k, v in env.items()}
    with pytest.raises(SettingsError, match=f"'{named}'"):
        load_settings(None, environ | {"CEDARBERG_DEFAULT_WAREHOUSE": "lake"}, {})
