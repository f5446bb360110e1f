"""A real S3 + STS server for tests: `moto_server` in a subprocess on a free loopback port.

    with moto_s3_server() as s3:
        config = {"warehouses": {"lake": s3.warehouse("lake", vending=True)}}

moto records every AssumeRole call, session policy included (`assumed_role`), but does not enforce
session policies: tests that need to know what vended credentials may do read the policy the
gateway sent rather than probing S3 with the credentials.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from tests.support.kms_servers import LOOPBACK, _stop_process, _venv_binary, _wait_until
from tests.support.ports import free_port

REGION = "us-east-1"
# The gateway's own keys. moto accepts any key (it checks no signature unless IAM auth is on).
ACCESS_KEY_ID = "AKIAGATEWAYTESTKEY01"
SECRET_ACCESS_KEY = "gateway-secret-3f9c1e7a5b2d4c6e8a0b"
ROLE_ARN = "arn:aws:iam::123456789012:role/cedarberg-vending"


@dataclass
class MotoS3Server:
    port: int
    bucket: str
    process: subprocess.Popen[bytes] = field(repr=False)

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    def warehouse(self, root: str, *, vending: bool = False, seal: bool = True) -> dict[str, Any]:
        """A `[warehouses.X]` table for `s3://bucket/root`, reached through this server."""
        config: dict[str, Any] = {
            "location": f"s3://{self.bucket}/{root}",
            "seal_metadata_files": seal,
            "drop_retention_seconds": 0,
            "s3": {
                "endpoint": self.url,
                "region": REGION,
                "access_key_id": ACCESS_KEY_ID,
                "secret_access_key": SECRET_ACCESS_KEY,
                "path_style_access": True,
            },
        }
        if vending:
            config["vending"] = {"role_arn": ROLE_ARN, "duration_seconds": 900}
        return config

    def client(self, service: str = "s3") -> Any:
        import boto3

        return boto3.session.Session().client(
            service,
            region_name=REGION,
            endpoint_url=self.url,
            aws_access_key_id=ACCESS_KEY_ID,
            aws_secret_access_key=SECRET_ACCESS_KEY,
        )

    def keys(self, prefix: str) -> list[str]:
        """Every object key under `prefix` in the bucket."""
        pages = self.client().get_paginator("list_objects_v2").paginate(Bucket=self.bucket, Prefix=prefix)
        return [item["Key"] for page in pages for item in page.get("Contents", [])]

    def read(self, key: str) -> bytes:
        return bytes(self.client().get_object(Bucket=self.bucket, Key=key)["Body"].read())

    def assumed_role(self, access_key_id: str) -> dict[str, Any]:
        """moto's record of the AssumeRole call that issued `access_key_id` (role, policy...)."""
        with urllib.request.urlopen(f"{self.url}/moto-api/data.json", timeout=10) as answer:
            data = json.loads(answer.read())
        for role in data.get("sts", {}).get("AssumedRole", []):
            if role.get("access_key_id") == access_key_id:
                return dict(role)
        raise KeyError(f"no AssumeRole issued {access_key_id}")

    def assume_role_count(self) -> int:
        with urllib.request.urlopen(f"{self.url}/moto-api/data.json", timeout=10) as answer:
            return len(json.loads(answer.read()).get("sts", {}).get("AssumedRole", []))

    def stop(self) -> None:
        _stop_process(self.process)


@contextlib.contextmanager
def moto_s3_server(bucket: str = "cedarberg-lake") -> Iterator[MotoS3Server]:
    """`moto_server` (S3, STS and the rest of moto) with an empty `bucket`."""
    port = free_port()
    process = subprocess.Popen(
        [_venv_binary("moto_server"), "-H", LOOPBACK, "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )

    def ready() -> bool:
        if process.poll() is not None:
            raise RuntimeError("moto_server exited")
        try:
            with urllib.request.urlopen(f"http://{LOOPBACK}:{port}/moto-api/", timeout=1):
                return True
        except (OSError, urllib.error.HTTPError):
            return False

    server = MotoS3Server(port, bucket, process)
    try:
        _wait_until(ready, 20, "moto_server")
        server.client().create_bucket(Bucket=bucket)
        yield server
    finally:
        server.stop()
