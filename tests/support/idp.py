"""Real OpenID Connect identity providers on loopback for the tests.

- `Oauth2MockServer`: ``oauth2-mock-server`` (npm), installed project-locally under ``tests/.node``
  by `ensure_oauth2_mock_server` (also done by ``scripts/install-test-deps.sh``, run by
  ``make test``). `stock=True` runs the package's own CLI; otherwise ``oauth2_mock_idp.mjs`` runs
  the same library with a hook that puts the client id into ``sub`` and honours ``groups`` /
  ``expires_in`` form fields of a client_credentials request (``groups_string``: the groups
  claim as one string, verbatim). Its issuer is
  ``http://localhost:PORT``; tokens carry a ``kid``.
- `OidcProviderMock`: ``oidc-provider-mock`` (PyPI, the ``test`` extra). Authorization-code flow
  only; its RS256 id_token has no ``kid``; its issuer is ``http://127.0.0.1:PORT``.
- `KeySetServer`: a discovery document and a JWKS served from a thread (plain HTTP, or HTTPS with
  a test PKI's server certificate), whose keys and `jwks_uri` the test sets, for tokens the test
  signs itself (a ten-year `exp`, a `cnf` binding, a key withdrawn from the set).

Both generate a fresh signing key at every start, so restarting one on the same port is a key
rotation as a relying party sees it.
"""

from __future__ import annotations

import http.server
import json
import os
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

import requests

from tests.support.ports import free_port

if TYPE_CHECKING:
    from tests.support.tls import TestPki

ROOT = Path(__file__).resolve().parents[2]
NODE_DIR = ROOT / "tests" / ".node"
OAUTH2_MOCK_SERVER_VERSION = "9.3.0"
OAUTH2_MOCK_SERVER_BIN = NODE_DIR / "node_modules" / ".bin" / "oauth2-mock-server"
OAUTH2_MOCK_SERVER_MODULE = NODE_DIR / "node_modules" / "oauth2-mock-server" / "dist" / "index.mjs"
LAUNCHER = Path(__file__).with_name("oauth2_mock_idp.mjs")

_install_lock = threading.Lock()


class IdpError(RuntimeError):
    """An identity provider could not be installed or started."""


def ensure_oauth2_mock_server() -> None:
    """Install oauth2-mock-server under tests/.node unless it is there already."""
    with _install_lock:
        if OAUTH2_MOCK_SERVER_BIN.exists() and OAUTH2_MOCK_SERVER_MODULE.exists():
            return
        npm = shutil.which("npm")
        if npm is None or shutil.which("node") is None:
            raise IdpError("node/npm not found: make test installs them (scripts/install-test-deps.sh)")
        NODE_DIR.mkdir(parents=True, exist_ok=True)
        subprocess.run(
            [
                npm,
                "install",
                "--prefix",
                str(NODE_DIR),
                "--no-audit",
                "--no-fund",
                "--loglevel=error",
                f"oauth2-mock-server@{OAUTH2_MOCK_SERVER_VERSION}",
            ],
            check=True,
            timeout=300,
        )


class _Process:
    """A server subprocess with its output in a temporary log file."""

    name = "idp"

    def __init__(self, port: int | None) -> None:
        self.port = port or free_port()
        self._dir = Path(tempfile.mkdtemp(prefix=f"cedarberg-{self.name}-"))
        self._proc: subprocess.Popen[bytes] | None = None

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _command(self) -> list[str]:
        raise NotImplementedError

    def start(self, timeout: float = 30.0) -> None:
        """Start the server; returns once its discovery document answers."""
        log = (self._dir / "server.log").open("ab")
        try:
            self._proc = subprocess.Popen(
                self._command(), stdout=log, stderr=subprocess.STDOUT, cwd=self._dir, env=_quiet_env()
            )
        finally:
            log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise IdpError(f"{self.name} exited with {self._proc.returncode}: {self.log_text()}")
            try:
                if requests.get(f"{self.base_url}/.well-known/openid-configuration", timeout=1).ok:
                    return
            except requests.RequestException:
                pass
            time.sleep(0.05)
        self.stop()
        raise IdpError(f"{self.name} did not become ready in {timeout} s: {self.log_text()}")

    def stop(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)

    def restart(self) -> None:
        """Stop and start again on the same port: a new signing key, as after a rotation."""
        self.stop()
        self.start()

    def close(self) -> None:
        self.stop()
        shutil.rmtree(self._dir, ignore_errors=True)

    def log_text(self) -> str:
        path = self._dir / "server.log"
        return path.read_text(errors="replace")[-4000:] if path.exists() else ""


def _quiet_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONWARNINGS"] = "ignore"
    return env


class Oauth2MockServer(_Process):
    """oauth2-mock-server on 127.0.0.1:port (see the module docstring)."""

    name = "oauth2-mock-server"

    def __init__(self, port: int | None = None, *, stock: bool = False, jwk_files: tuple[Path, ...] = ()):
        super().__init__(port)
        self.stock = stock
        self.jwk_files = jwk_files

    @property
    def issuer(self) -> str:
        return f"http://localhost:{self.port}"

    def _command(self) -> list[str]:
        ensure_oauth2_mock_server()
        jwks = [str(path) for path in self.jwk_files]
        if self.stock:
            return [
                str(OAUTH2_MOCK_SERVER_BIN),
                "-a",
                "127.0.0.1",
                "-p",
                str(self.port),
                *[arg for path in jwks for arg in ("--jwk", path)],
            ]
        node = shutil.which("node") or "node"
        return [node, str(LAUNCHER), str(OAUTH2_MOCK_SERVER_MODULE), "127.0.0.1", str(self.port), *jwks]

    def client_credentials(self, client_id: str, audience: str, **fields: str) -> str:
        """An access token (JWT) from the token endpoint's client_credentials grant."""
        response = requests.post(
            f"{self.base_url}/token",
            data={"grant_type": "client_credentials", "client_id": client_id, "aud": audience, **fields},
            timeout=10,
        )
        response.raise_for_status()
        token: str = response.json()["access_token"]
        return token


class OidcProviderMock(_Process):
    """oidc-provider-mock on 127.0.0.1:port (see the module docstring)."""

    name = "oidc-provider-mock"

    def __init__(self, port: int | None = None, *, token_max_age: int | None = None) -> None:
        super().__init__(port)
        self.token_max_age = token_max_age

    @property
    def issuer(self) -> str:
        return self.base_url

    def _command(self) -> list[str]:
        command = [sys.executable, "-m", "oidc_provider_mock", "-H", "127.0.0.1", "-p", str(self.port)]
        if self.token_max_age is not None:
            command += ["-e", str(self.token_max_age)]
        return command

    def set_user(self, sub: str, claims: dict[str, Any]) -> None:
        """Store the claims the provider will put into `sub`'s id_token."""
        response = requests.put(
            f"{self.base_url}/users/{sub}",
            data=json.dumps(claims),
            headers={"Content-Type": "application/json"},
            timeout=10,
        )
        response.raise_for_status()

    def id_token(self, sub: str, client_id: str) -> str:
        """An id_token for `sub` through the authorization-code flow (`aud` is `client_id`)."""
        redirect_uri = "http://127.0.0.1/callback"
        response = requests.post(
            f"{self.base_url}/oauth2/authorize",
            params={
                "client_id": client_id,
                "redirect_uri": redirect_uri,
                "response_type": "code",
                "scope": "openid",
            },
            data={"sub": sub},
            allow_redirects=False,
            timeout=10,
        )
        if response.status_code != 302:
            raise IdpError(f"authorize answered {response.status_code}: {response.text[:200]}")
        code = parse_qs(urlsplit(response.headers["Location"]).query)["code"][0]
        response = requests.post(
            f"{self.base_url}/oauth2/token",
            data={
                "grant_type": "authorization_code",
                "code": code,
                "redirect_uri": redirect_uri,
                "client_id": client_id,
                "client_secret": "unused",
            },
            timeout=10,
        )
        response.raise_for_status()
        token: str = response.json()["id_token"]
        return token


class KeySetServer:
    """An issuer's discovery document and JWKS on 127.0.0.1, served from a thread.

    `keys` (public JWKs) and `jwks_uri` (default: this server's ``/keys``) may be changed while
    it runs; `jwks_hits` counts key downloads. With `pki`, it serves HTTPS with the PKI's server
    certificate and its issuer is ``https://127.0.0.1:PORT``.
    """

    def __init__(self, pki: TestPki | None = None) -> None:
        self.keys: list[dict[str, Any]] = []
        self.jwks_uri: str | None = None
        self.jwks_hits = 0
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self.scheme = "http"
        if pki is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(pki.server_cert, pki.server_key)
            self._server.socket = context.wrap_socket(self._server.socket, server_side=True)
            self.scheme = "https"
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def issuer(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"

    @property
    def keys_url(self) -> str:
        return f"{self.issuer}/keys"

    def start(self) -> KeySetServer:
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def _handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                body: dict[str, Any]
                if self.path == "/.well-known/openid-configuration":
                    body = {"issuer": owner.issuer, "jwks_uri": owner.jwks_uri or owner.keys_url}
                elif self.path == "/keys":
                    owner.jwks_hits += 1
                    body = {"keys": list(owner.keys)}
                else:
                    self.send_error(404)
                    return
                data = json.dumps(body).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:
                return

        return Handler
