"""How `cedarberg admin ...` reaches a running gateway: its URL, the CA that verifies it, the
operator's credential, and one JSON request at a time over the gateway's HTTP API.

- URL: `--url`, else the address in the deployment's settings, loaded exactly as `cedarberg serve`
  loads them (`--config`, then `CEDARBERG_*` variables), as `cedarberg keys create` derives it.
- CA: `--ca-file` (PEM), else the system's trust store (which honours `SSL_CERT_FILE`). The
  gateway's certificate is always verified: there is no switch to turn that off.
- Credential: an API key (`cbk_<id>_<secret>`) of an admin, from the environment variable
  `CB_ADMIN_KEY` or from the file `--key-file` (first line). Never from a command-line argument,
  which would land in shell history and in the process list. (The variable does not start with
  `CEDARBERG_`: those are the gateway's settings, which refuse unknown names.)

Errors: `AdminError` carries the HTTP status and the ErrorModel's message (never the credential);
`AdminSetupError` is a usage problem (no credential, bad settings) that exits 2.
The HTTP client (urllib) is imported only when a request is made, so the CLI starts fast.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import orjson

# The settings (pydantic) load only when a command needs the gateway's URL from them: the parser
# serves `cedarberg --help` (tests/gateway/test_cli_startup.py).
if TYPE_CHECKING:
    from cedarberg.gateway.config.settings import Settings

KEY_VARIABLE = "CB_ADMIN_KEY"
TIMEOUT_SECONDS = 30.0
MAX_ANSWER_BYTES = 16 * 1024 * 1024
MAX_KEY_FILE_BYTES = 4096


class AdminSetupError(Exception):
    """The command cannot be run as given (exit 2)."""


class AdminError(Exception):
    """The gateway refused the request or could not be reached (exit 1)."""

    def __init__(self, status: int | None, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message

    def __str__(self) -> str:
        if self.status is None:
            return self.message
        return f"{self.status}: {self.message}"


def add_connection_options(parser: argparse.ArgumentParser) -> None:
    """The options every `admin` command shares."""
    parser.add_argument("--config", type=Path, help="TOML configuration file (as for serve): finds the URL")
    parser.add_argument("--url", help="the gateway's base URL (default: its address from the settings)")
    parser.add_argument("--ca-file", type=Path, help="PEM CA bundle that verifies the gateway's certificate")
    parser.add_argument(
        "--key-file",
        type=Path,
        help=f"file holding the admin API key (default: the {KEY_VARIABLE} environment variable; "
        "a key is never taken as an argument, which would land in shell history)",
    )
    parser.add_argument("--json", action="store_true", help="print the gateway's JSON answer")


def gateway_url(settings: Settings) -> str:
    """The gateway's own address from its settings (a wildcard listen address as localhost)."""
    scheme = "https" if settings.tls.enabled else "http"
    host = settings.host
    if host in {"0.0.0.0", "::", ""}:  # noqa: S104 (a listen address, not a bind)
        host = "localhost"
    elif ":" in host:
        host = f"[{host}]"
    return f"{scheme}://{host}:{settings.port}"


def _credential(args: argparse.Namespace, environ: Mapping[str, str]) -> str:
    if args.key_file is not None:
        try:
            with Path(args.key_file).open("rb") as handle:
                raw = handle.read(MAX_KEY_FILE_BYTES + 1)
        except OSError as err:
            raise AdminSetupError(f"cannot read --key-file: {err.strerror or err}") from None
        lines = raw.decode("utf-8", "replace").strip().splitlines()
        key = lines[0].strip() if lines and len(raw) <= MAX_KEY_FILE_BYTES else ""
        if not key:
            raise AdminSetupError("--key-file must hold an API key (cbk_<id>_<secret>) on its first line")
        return key
    key = environ.get(KEY_VARIABLE, "").strip()
    if not key:
        raise AdminSetupError(
            f"no admin credential: set {KEY_VARIABLE} to an admin's API key (cbk_<id>_<secret>) "
            "or give --key-file PATH"
        )
    return key


@dataclass(frozen=True)
class AdminClient:
    """JSON requests to one gateway with one credential."""

    url: str
    credential: str = field(repr=False)
    ca_file: Path | None = None

    @classmethod
    def from_args(cls, args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> AdminClient:
        """The client the options describe. Raises AdminSetupError."""
        environ = os.environ if environ is None else environ
        credential = _credential(args, environ)
        url = args.url
        if url is None:
            from cedarberg.gateway.config.settings import SettingsError, load_settings

            try:
                url = gateway_url(load_settings(args.config, environ, {}))
            except SettingsError as err:
                raise AdminSetupError(str(err)) from None
        if not url.startswith(("https://", "http://")):
            raise AdminSetupError("--url must start with https:// or http://")
        return cls(url.rstrip("/"), credential, args.ca_file)

    def call(
        self,
        method: str,
        path: str,
        body: Mapping[str, Any] | None = None,
        query: list[tuple[str, str]] | None = None,
    ) -> Any:
        """The decoded JSON answer (None for an empty one). Raises AdminError: the status and the
        ErrorModel's message for an error answer, or why the gateway could not be reached."""
        import ssl
        import urllib.error
        import urllib.request

        target = self.url + path + (f"?{urlencode(query)}" if query else "")
        headers = {"Authorization": f"Bearer {self.credential}", "Accept": "application/json"}
        data = None
        if body is not None:
            data = orjson.dumps(body)
            headers["Content-Type"] = "application/json"
        request = urllib.request.Request(target, data=data, headers=headers, method=method)  # noqa: S310
        context = None
        if target.startswith("https://"):
            context = ssl.create_default_context(cafile=str(self.ca_file) if self.ca_file else None)
        try:
            with urllib.request.urlopen(request, timeout=TIMEOUT_SECONDS, context=context) as answer:  # noqa: S310
                raw = answer.read(MAX_ANSWER_BYTES)
        except urllib.error.HTTPError as err:
            raise AdminError(err.code, _error_message(err.read(MAX_ANSWER_BYTES), err.reason)) from None
        except urllib.error.URLError as err:
            raise AdminError(None, f"cannot reach the gateway at {self.url}: {err.reason}") from None
        except (OSError, ValueError) as err:
            raise AdminError(None, f"cannot reach the gateway at {self.url}: {err}") from None
        return orjson.loads(raw) if raw else None


def _error_message(raw: bytes, reason: str) -> str:
    """The message of an Iceberg ErrorModel (`{"error": {"message", "type", "code"}}`) or of an
    OAuth2 error, else the HTTP reason phrase."""
    try:
        document = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return str(reason)
    if isinstance(document, dict):
        error = document.get("error")
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            kind = error.get("type")
            return f"{error['message']} ({kind})" if isinstance(kind, str) else str(error["message"])
        if isinstance(error, str):
            description = document.get("error_description")
            return f"{error}: {description}" if isinstance(description, str) else error
    return str(reason)
