"""Admin steps of the demo (used by scripts/demo.sh), over TLS with the bootstrap admin key.

- ``wait``: wait until ``GET /v1/config`` answers 200 to the admin.
- ``anonymous``: show that a request without credentials is refused with 401 (exit 1 otherwise).
- ``setup``: create the pipeline's namespaces with their grants --
  ``raw`` (raw events with PII: ``cedarberg.writers = etl``, no readers) and ``analytics``
  (``cedarberg.writers = etl``, ``cedarberg.readers = analysts``) -- then one API key for the
  pipeline's service account (group ``etl``), one for an analyst (group ``analysts``) and one for
  a security admin, a person in group ``admins`` who signs in to the console with it, through
  ``POST /admin/v1/api-keys``, printed on stdout as ``PIPELINE_SERVICE_KEY=...``,
  ``PIPELINE_ANALYST_KEY=...`` and ``CONSOLE_ADMIN_KEY=...`` (demo.sh reads them from there and
  shows only the console's, once, at its end).

The admin key is read from the environment variable ``DEMO_ADMIN_KEY``, never from argv.
"""

from __future__ import annotations

import argparse
import json
import os
import ssl
import sys
import time
import urllib.error
import urllib.request
from typing import Any

WRITERS = "etl"
READERS = "analysts"
ADMINS = "admins"  # the bundled policies' administrators: every console page is open to them
NAMESPACES = {
    "raw": {"cedarberg.writers": WRITERS, "owner": "data-platform", "contains-pii": "true"},
    "analytics": {"cedarberg.writers": WRITERS, "cedarberg.readers": READERS, "owner": "data-platform"},
}
KEYS = (  # (variable, principal, kind: a service account's key or a person's, group)
    ("PIPELINE_SERVICE_KEY", "pipeline-svc", "service", WRITERS),
    ("PIPELINE_ANALYST_KEY", "ana", "user", READERS),
    ("CONSOLE_ADMIN_KEY", "security-admin", "user", ADMINS),
)


class Gateway:
    def __init__(self, uri: str, ca_cert: str, admin_key: str | None) -> None:
        self.uri = uri.rstrip("/")
        self.context = ssl.create_default_context(cafile=ca_cert)
        self.headers = {"Content-Type": "application/json"}
        if admin_key:
            self.headers["Authorization"] = f"Bearer {admin_key}"

    def call(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        request = urllib.request.Request(  # noqa: S310 (the demo's own https URL)
            self.uri + path, data=data, method=method, headers=self.headers
        )
        try:
            with urllib.request.urlopen(request, timeout=30, context=self.context) as response:  # noqa: S310
                raw = response.read()
                return response.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as err:
            raw = err.read()
            try:
                return err.code, json.loads(raw)
            except ValueError:
                return err.code, raw.decode(errors="replace")


def wait(gateway: Gateway, pid: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            sys.exit("the gateway exited before it was ready")
        try:
            status, body = gateway.call("GET", "/v1/config")
            if status == 200:
                return
            if status in (401, 403):
                sys.exit(f"the gateway refused the admin key: {status} {body}")
        except OSError:
            pass
        if time.monotonic() > deadline:
            sys.exit(f"the gateway was not ready after {timeout:.0f} s")
        time.sleep(0.2)


def anonymous(gateway: Gateway) -> None:
    status, body = gateway.call("GET", "/v1/namespaces")
    print(f"==> without credentials: GET /v1/namespaces -> {status} {json.dumps(body)}", file=sys.stderr)
    if status != 401:
        sys.exit("expected 401 without credentials")


def setup(gateway: Gateway) -> None:
    status, config = gateway.call("GET", "/v1/config")
    if status != 200:
        sys.exit(f"GET /v1/config: {status} {config}")
    prefix = config.get("overrides", {}).get("prefix")
    root = f"/v1/{prefix}" if prefix else "/v1"
    for namespace, grants in NAMESPACES.items():
        new_namespace = {"namespace": [namespace], "properties": grants}
        status, body = gateway.call("POST", f"{root}/namespaces", new_namespace)
        if status == 409:  # left over from an earlier run: make sure the grants are as intended
            status, body = gateway.call(
                "POST", f"{root}/namespaces/{namespace}/properties", {"removals": [], "updates": grants}
            )
        if status != 200:
            sys.exit(f"creating namespace {namespace!r}: {status} {body}")
        readers = grants.get("cedarberg.readers", "nobody")
        print(
            f"==> namespace {namespace}: writers = group {grants['cedarberg.writers']}, readers = {readers}",
            file=sys.stderr,
        )
    for variable, principal, kind, group in KEYS:
        status, body = gateway.call(
            "POST", "/admin/v1/api-keys", {"principal": principal, "kind": kind, "groups": [group]}
        )
        if status not in (200, 201) or not isinstance(body, dict) or "key" not in body:
            sys.exit(f"creating an API key for {principal}: {status} {body}")
        print(f"==> {body['summary']} (group {group}) created: id {body['key'][4:20]}", file=sys.stderr)
        print(f"{variable}={body['key']}")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("command", choices=["wait", "anonymous", "setup"])
    parser.add_argument("--uri", required=True, help="gateway base URL (https://...)")
    parser.add_argument("--ca-cert", required=True, help="CA certificate (PEM) to trust")
    parser.add_argument("--pid", type=int, help="gateway process id (wait: stop waiting if it exits)")
    parser.add_argument("--timeout", type=float, default=30.0, help="wait: seconds before giving up")
    args = parser.parse_args()
    if args.command == "anonymous":
        anonymous(Gateway(args.uri, args.ca_cert, None))
        return 0
    admin_key = os.environ.get("DEMO_ADMIN_KEY", "")
    if not admin_key:
        parser.error("set DEMO_ADMIN_KEY to the admin API key")
    gateway = Gateway(args.uri, args.ca_cert, admin_key)
    if args.command == "wait":
        wait(gateway, args.pid or os.getppid(), args.timeout)
    else:
        setup(gateway)
    return 0


if __name__ == "__main__":
    sys.exit(main())
