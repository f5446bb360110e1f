"""A real S3 + STS server for tests: `moto_server` in a subprocess on a free loopback port.

    with moto_s3_server() as s3:
        config = {"warehouses": {"lake": s3.warehouse("lake", vending=True)}}

moto does not enforce session policies (it keeps them, but its `/moto-api/data.json` fails once S3
holds objects): the server's STS endpoint is a recording proxy in front of moto, and tests that
need to know what vended credentials may do read the policy the gateway sent (`assumed_role`).
"""

from __future__ import annotations

import contextlib
import http.client
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

from tests.support.kms_servers import LOOPBACK, _stop_process, start_moto_server
from tests.support.ports import free_port

REGION = "us-east-1"
ROLE_NAME = "cedarberg-vending"
ROLE_ARN = f"arn:aws:iam::123456789012:role/{ROLE_NAME}"
# moto checks signatures and IAM policies only past its first N requests: N is the number of set-up
# calls made with made-up keys (the user, its key and policy, the role and its policy).
_SETUP_CALLS = 5
_ALLOW_ALL = '{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Action":"*","Resource":"*"}]}'
_TRUST_ANY = (
    '{"Version":"2012-10-17","Statement":[{"Effect":"Allow","Principal":{"AWS":"*"},'
    '"Action":"sts:AssumeRole"}]}'
)


class StsRecorder:
    """An HTTP proxy to moto's STS that records every call: its form fields and, for AssumeRole,
    the access key id it issued."""

    def __init__(self, upstream_address: str) -> None:
        self.upstream_address = upstream_address  # host:port
        self.calls: list[dict[str, str]] = []
        self._lock = threading.Lock()
        recorder = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                # Host is forwarded as it was signed: the signature covers it.
                headers = {k: v for k, v in self.headers.items() if k.lower() != "content-length"}
                upstream = http.client.HTTPConnection(recorder.upstream_address, timeout=30)
                try:
                    upstream.request("POST", self.path, body=body, headers=headers)
                    answer = upstream.getresponse()
                    status, payload = answer.status, answer.read()
                finally:
                    upstream.close()
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
    # The gateway's own keys: an IAM user of moto's, so S3 and STS check their signatures.
    access_key_id: str = ""
    secret_access_key: str = field(default="", repr=False)

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
                "access_key_id": self.access_key_id,
                "secret_access_key": self.secret_access_key,
                "path_style_access": True,
            },
        }
        if vending:
            sts = self.sts.url if self.sts is not None else self.url
            config["vending"] = {"role_arn": ROLE_ARN, "duration_seconds": 900, "sts_endpoint": sts}
        return config

    def client(self, service: str = "s3", access_key_id: str = "", secret_access_key: str = "") -> Any:
        """A boto3 client with the gateway's keys (or the given ones)."""
        import boto3

        return boto3.session.Session().client(
            service,
            region_name=REGION,
            endpoint_url=self.url,
            aws_access_key_id=access_key_id or self.access_key_id,
            aws_secret_access_key=secret_access_key or self.secret_access_key,
        )

    def _set_up_identities(self) -> None:
        iam = self.client("iam", "AKIASETUPONLY0000000", "set-up-only")
        iam.create_user(UserName="cedarberg-gateway")
        key = iam.create_access_key(UserName="cedarberg-gateway")["AccessKey"]
        iam.put_user_policy(UserName="cedarberg-gateway", PolicyName="all", PolicyDocument=_ALLOW_ALL)
        iam.create_role(RoleName=ROLE_NAME, AssumeRolePolicyDocument=_TRUST_ANY)
        iam.put_role_policy(RoleName=ROLE_NAME, PolicyName="all", PolicyDocument=_ALLOW_ALL)
        self.access_key_id, self.secret_access_key = key["AccessKeyId"], key["SecretAccessKey"]

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
    """`moto_server` (S3, STS, IAM) with an empty `bucket`, checking every request's signature
    against its IAM users and assumed roles: an unsigned or wrongly signed request gets 403."""
    port = free_port()
    process = start_moto_server(port, {"INITIAL_NO_AUTH_ACTION_COUNT": str(_SETUP_CALLS)})
    server = MotoS3Server(port, bucket, process)
    try:
        server._set_up_identities()
        server.sts = StsRecorder(f"{LOOPBACK}:{port}")
        server.client().create_bucket(Bucket=bucket)
        yield server
    finally:
        server.stop()
