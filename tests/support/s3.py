"""A real S3 + STS server for tests: `moto_server` in a subprocess on a free loopback port.

    with moto_s3_server() as s3:
        config = {"warehouses": {"lake": s3.warehouse("lake", vending=True)}}

moto does not enforce session policies (it keeps them, but its `/moto-api/data.json` fails once S3
holds objects): the server's STS endpoint is a recording proxy in front of moto, and tests that
need to know what vended credentials may do read the policy the gateway sent (`assumed_role`).
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from tests.support.kms_servers import LOOPBACK, _stop_process, _venv_binary, _wait_until
from tests.support.ports import free_port

REGION = "us-east-1"
# The gateway's own keys. moto accepts any key (it checks no signature unless IAM auth is on).
ACCESS_KEY_ID = "AKIAGATEWAYTESTKEY01"
SECRET_ACCESS_KEY = "gateway-secret-3f9c1e7a5b2d4c6e8a0b"
ROLE_ARN = "arn:aws:iam::123456789012:role/cedarberg-vending"


class StsRecorder:
    """An HTTP proxy to moto's STS that records every call: its form fields and, for AssumeRole,
    the access key id it issued."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.calls: list[dict[str, str]] = []
        self._lock = threading.Lock()
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                headers = {
                    k: v for k, v in self.headers.items() if k.lower() not in ("host", "content-length")
                }
                forwarded = urllib.request.Request(
                    recorder.upstream + self.path, data=body, headers=headers, method="POST"
                )
                try:
                    with urllib.request.urlopen(forwarded, timeout=30) as answer:
                        status, payload = answer.status, answer.read()
                except urllib.error.HTTPError as err:
                    status, payload = err.code, err.read()
                call = dict(urllib.parse.parse_qsl(body.decode()))
                issued = re.search(rb"<AccessKeyId>([^<]+)</AccessKeyId>", payload)
                if issued is not None:
                    call["IssuedAccessKeyId"] = issued.group(1).decode()
                with recorder._lock:
                    recorder.calls.append(call)
                self.send_response(status)
                self.send_header("Content-Type", "text/xml")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer((LOOPBACK, 0), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self._server.server_address[1]}"

    def assume_role_calls(self) -> list[dict[str, str]]:
        with self._lock:
            return [call for call in self.calls if call.get("Action") == "AssumeRole"]

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


@dataclass
class MotoS3Server:
    port: int
    bucket: str
    process: subprocess.Popen[bytes] = field(repr=False)
    sts: StsRecorder | None = field(default=None, repr=False)

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
            sts = self.sts.url if self.sts is not None else self.url
            config["vending"] = {"role_arn": ROLE_ARN, "duration_seconds": 900, "sts_endpoint": sts}
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

    def assumed_role(self, access_key_id: str) -> dict[str, str]:
        """The AssumeRole call (form fields: RoleArn, Policy...) that issued `access_key_id`."""
        for call in self.sts.assume_role_calls() if self.sts is not None else []:
            if call.get("IssuedAccessKeyId") == access_key_id:
                return call
        raise KeyError(f"no AssumeRole issued {access_key_id}")

    def assume_role_count(self) -> int:
        return len(self.sts.assume_role_calls()) if self.sts is not None else 0

    def stop(self) -> None:
        if self.sts is not None:
            self.sts.stop()
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
        server.sts = StsRecorder(server.url)
        server.client().create_bucket(Bucket=bucket)
        yield server
    finally:
        server.stop()
