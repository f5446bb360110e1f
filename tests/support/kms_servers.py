"""KMS servers for tests: the real OpenBao and moto servers, and wire-protocol fakes of Cloud KMS
(gRPC) and Key Vault (HTTPS) that the real Google and Azure SDKs talk to.

Each context manager yields a handle with

    kek_uri      the KEK URI the gateway should use
    kms_config   the `[kms]` settings section (a dict KmsSettings accepts)
    rotate()     a server-side KEK rotation (new version / alias re-pointed)
    pointed_at(port) -> (kek_uri, kms_config) for the same KEK at another loopback port, to test
                 an unreachable or unresponsive KMS

plus server-specific controls (OpenBao seal/unseal, fake stop/start, request logs). Every server
binds 127.0.0.1 on a free port and is stopped on exit.

    with openbao_server() as bao:
        settings = KmsSettings.model_validate(bao.kms_config)
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import http.server
import json
import os
import re
import secrets
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator, Mapping
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.support.ports import free_port, port_is_free
from tests.support.tls import TestPki

LOOPBACK = "127.0.0.1"


def _wait_until(probe: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if probe():
            return
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not become ready within {timeout} s")


def _venv_binary(name: str) -> str:
    beside = Path(sys.executable).parent / name
    found = str(beside) if beside.exists() else shutil.which(name)
    if found is None:
        raise RuntimeError(f"{name} not found next to {sys.executable} or on PATH")
    return found


def _stop_process(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)


@contextlib.contextmanager
def unresponsive_port() -> Iterator[int]:
    """A loopback port that accepts TCP connections (the kernel completes the handshake) but never
    answers: a hung KMS. Clients must give up on their own timeout."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind((LOOPBACK, 0))
    sock.listen(64)
    try:
        yield int(sock.getsockname()[1])
    finally:
        sock.close()


# --------------------------------------------------------------------------------------------
# OpenBao (Vault API)
# --------------------------------------------------------------------------------------------


@dataclass
class OpenBaoServer:
    port: int
    token: str
    mount: str
    key: str
    unseal_key: str
    process: subprocess.Popen[bytes] = field(repr=False)

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def kek_uri(self) -> str:
        return f"vault-transit://{LOOPBACK}:{self.port}/{self.mount}/{self.key}"

    @property
    def kms_config(self) -> dict[str, Any]:
        return {"kek": self.kek_uri, "vault": {"token": self.token, "tls": False}}

    def pointed_at(self, port: int) -> tuple[str, dict[str, Any]]:
        uri = f"vault-transit://{LOOPBACK}:{port}/{self.mount}/{self.key}"
        return uri, {**self.kms_config, "kek": uri}

    def api(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        """Call the Vault HTTP API as root; raises urllib.error.HTTPError on a non-2xx answer."""
        request = urllib.request.Request(
            f"{self.url}/v1/{path}",
            method=method,
            data=json.dumps(body).encode() if body is not None else None,
            headers={"X-Vault-Token": self.token},
        )
        with urllib.request.urlopen(request, timeout=5) as response:
            raw = response.read()
        return json.loads(raw) if raw else {}

    def create_key(self, name: str, **options: Any) -> None:
        self.api("POST", f"{self.mount}/keys/{name}", {"type": "aes256-gcm96", **options})

    def rotate(self) -> None:
        self.rotate_key()

    def rotate_key(self) -> None:
        self.api("POST", f"{self.mount}/keys/{self.key}/rotate")

    def seal(self) -> None:
        self.api("PUT", "sys/seal")

    def unseal(self) -> None:
        answer = self.api("PUT", "sys/unseal", {"key": self.unseal_key})
        if answer.get("sealed") is not False:
            raise RuntimeError("OpenBao did not unseal")

    def stop(self) -> None:
        _stop_process(self.process)


@contextlib.contextmanager
def openbao_server(key: str = "cedarberg", mount: str = "transit") -> Iterator[OpenBaoServer]:
    """The real `bao server -dev` (in-memory storage), with transit enabled at `mount` and an
    aes256-gcm96 key `key`."""
    bao = _venv_binary("bao")
    token = "root-" + secrets.token_hex(8)
    with tempfile.TemporaryDirectory(prefix="openbao-") as home:
        server = None
        for _ in range(5):  # the cluster listener takes PORT+1, which must be free as well
            port = free_port()
            if not port_is_free(port + 1):
                continue
            server = _start_openbao(bao, port, token, Path(home), key, mount)
            if server is not None:
                break
        if server is None:
            raise RuntimeError("could not start OpenBao")
        try:
            server.api("POST", f"sys/mounts/{mount}", {"type": "transit"})
            server.create_key(key)
            yield server
        finally:
            server.stop()


def _start_openbao(bao: str, port: int, token: str, home: Path, key: str, mount: str) -> OpenBaoServer | None:
    log = home / f"bao-{port}.log"
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                bao,
                "server",
                "-dev",
                "-dev-no-store-token",
                f"-dev-root-token-id={token}",
                f"-dev-listen-address={LOOPBACK}:{port}",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=home,
            env={"HOME": str(home), "PATH": os.environ.get("PATH", "")},
        )
    unseal_key: list[str] = []

    def ready() -> bool:
        if process.poll() is not None:
            return True
        found = re.search(r"^Unseal Key: (\S+)$", log.read_text(errors="replace"), re.MULTILINE)
        if found is None:
            return False
        unseal_key.append(found.group(1))
        try:
            with urllib.request.urlopen(f"http://{LOOPBACK}:{port}/v1/sys/health", timeout=1):
                return True
        except (OSError, urllib.error.HTTPError):
            return False

    try:
        _wait_until(ready, 15, "OpenBao")
    except RuntimeError:
        _stop_process(process)
        raise
    if process.poll() is not None:  # e.g. a port taken in the meantime: try another
        return None
    return OpenBaoServer(port, token, mount, key, unseal_key[-1], process)


# --------------------------------------------------------------------------------------------
# moto (AWS KMS)
# --------------------------------------------------------------------------------------------

MOTO_REGION = "us-east-1"
MOTO_CREDENTIALS = {"access_key_id": "testing", "secret_access_key": "testing"}


@dataclass
class MotoKmsServer:
    port: int
    alias: str
    key_arns: list[str]
    process: subprocess.Popen[bytes] = field(repr=False)

    @property
    def url(self) -> str:
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def kek_uri(self) -> str:
        return f"aws-kms://{self.alias}"

    @property
    def kms_config(self) -> dict[str, Any]:
        return {"kek": self.kek_uri, "aws": self._aws(self.url)}

    def pointed_at(self, port: int) -> tuple[str, dict[str, Any]]:
        return self.kek_uri, {"kek": self.kek_uri, "aws": self._aws(f"http://{LOOPBACK}:{port}")}

    def client(self) -> Any:
        import boto3

        return boto3.session.Session().client(
            "kms",
            region_name=MOTO_REGION,
            endpoint_url=self.url,
            aws_access_key_id=MOTO_CREDENTIALS["access_key_id"],
            aws_secret_access_key=MOTO_CREDENTIALS["secret_access_key"],
        )

    def rotate(self) -> None:
        self.retarget_alias()

    def retarget_alias(self) -> str:
        """Point the alias at a new key (AWS's way to move a KEK to new material); its ARN."""
        kms = self.client()
        arn = str(kms.create_key(Description="cedarberg test KEK")["KeyMetadata"]["Arn"])
        kms.update_alias(AliasName=self.alias, TargetKeyId=arn)
        self.key_arns.append(arn)
        return arn

    def stop(self) -> None:
        _stop_process(self.process)

    @staticmethod
    def _aws(endpoint_url: str) -> dict[str, Any]:
        return {"region": MOTO_REGION, "endpoint_url": endpoint_url, **MOTO_CREDENTIALS}


def start_moto_server(port: int, env: Mapping[str, str] | None = None) -> subprocess.Popen[bytes]:
    """`moto_server` on 127.0.0.1:`port` (with `env` added to the environment), once it answers;
    stopped again if it never does."""
    process = subprocess.Popen(
        [_venv_binary("moto_server"), "-H", LOOPBACK, "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=None if env is None else {**os.environ, **env},
    )

    def ready() -> bool:
        if process.poll() is not None:
            raise RuntimeError("moto_server exited")
        try:
            with urllib.request.urlopen(f"http://{LOOPBACK}:{port}/moto-api/", timeout=1):
                return True
        except (OSError, urllib.error.HTTPError):
            return False

    try:
        _wait_until(ready, 20, "moto_server")
    except BaseException:
        _stop_process(process)
        raise
    return process


@contextlib.contextmanager
def moto_kms_server(alias: str = "alias/cedarberg") -> Iterator[MotoKmsServer]:
    """`moto_server` in a subprocess with a KMS key behind `alias`."""
    port = free_port()
    server = MotoKmsServer(port, alias, [], start_moto_server(port))
    try:
        kms = server.client()
        arn = str(kms.create_key(Description="cedarberg test KEK")["KeyMetadata"]["Arn"])
        kms.create_alias(AliasName=alias, TargetKeyId=arn)
        server.key_arns.append(arn)
        yield server
    finally:
        server.stop()


# --------------------------------------------------------------------------------------------
# Cloud KMS (gRPC fake)
# --------------------------------------------------------------------------------------------

GCP_KEY_NAME = "projects/cedarberg-test/locations/global/keyRings/ring/cryptoKeys/kek"


def crc32c_reference(data: bytes) -> int:
    """Bitwise CRC32C, independent of the provider's table-driven one."""
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 & -(crc & 1))
    return crc ^ 0xFFFFFFFF


@dataclass
class _GcpKey:
    versions: dict[int, bytes] = field(default_factory=dict)
    primary: int = 0


class GcpKmsFake:
    """google.cloud.kms.v1.KeyManagementService: Encrypt, Decrypt and GetCryptoKey, with real
    AES-256-GCM (the AAD is authenticated) and CRC32C checksums like the real service.

    Ciphertext = version (4 bytes, big-endian) || nonce (12) || AES-GCM output, so Decrypt finds
    the version that encrypted it. `corrupt_checksums` makes answers carry wrong checksums.
    """

    def __init__(self, port: int) -> None:
        self.port = port
        self.keys: dict[str, _GcpKey] = {}
        self.calls: list[str] = []
        self.corrupt_checksums = False
        self._lock = threading.Lock()
        self._server: Any = None
        self.add_key(GCP_KEY_NAME)

    @property
    def kek_uri(self) -> str:
        return f"gcp-kms://{GCP_KEY_NAME}"

    @property
    def kms_config(self) -> dict[str, Any]:
        return self.pointed_at(self.port)[1]

    def pointed_at(self, port: int) -> tuple[str, dict[str, Any]]:
        return self.kek_uri, {
            "kek": self.kek_uri,
            "gcp": {"endpoint": f"{LOOPBACK}:{port}", "insecure_loopback": True},
        }

    def add_key(self, name: str) -> None:
        with self._lock:
            self.keys[name] = _GcpKey()
        self.rotate(name)

    def rotate(self, name: str = GCP_KEY_NAME) -> str:
        """Add a key version and make it primary; its resource name."""
        with self._lock:
            key = self.keys[name]
            version = max(key.versions, default=0) + 1
            key.versions[version] = secrets.token_bytes(32)
            key.primary = version
        return f"{name}/cryptoKeyVersions/{version}"

    def start(self) -> None:
        import grpc
        from google.cloud import kms_v1

        def unary(fn: Callable[[Any, Any], Any], request: Any, response: Any) -> Any:
            return grpc.unary_unary_rpc_method_handler(
                fn, request_deserializer=request.deserialize, response_serializer=response.serialize
            )

        handler = grpc.method_handlers_generic_handler(
            "google.cloud.kms.v1.KeyManagementService",
            {
                "Encrypt": unary(self._encrypt, kms_v1.EncryptRequest, kms_v1.EncryptResponse),
                "Decrypt": unary(self._decrypt, kms_v1.DecryptRequest, kms_v1.DecryptResponse),
                "GetCryptoKey": unary(self._get_crypto_key, kms_v1.GetCryptoKeyRequest, kms_v1.CryptoKey),
            },
        )
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
        server.add_generic_rpc_handlers((handler,))
        if server.add_insecure_port(f"{LOOPBACK}:{self.port}") != self.port:
            raise RuntimeError(f"gRPC fake could not bind port {self.port}")
        server.start()
        self._server = server

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(grace=None).wait(5)
            self._server = None

    def _key(self, name: str, context: Any) -> _GcpKey:
        import grpc

        key = self.keys.get(name)
        if key is None:
            context.abort(grpc.StatusCode.NOT_FOUND, f"{name} not found.")
        assert key is not None
        return key

    def _crc(self, data: bytes) -> int:
        return crc32c_reference(data) ^ (1 if self.corrupt_checksums else 0)

    def _encrypt(self, request: Any, context: Any) -> Any:
        import grpc
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        from google.cloud import kms_v1

        self.calls.append("Encrypt")
        with self._lock:
            key = self._key(request.name, context)
            version, material = key.primary, key.versions[key.primary]
        plaintext, aad = bytes(request.plaintext), bytes(request.additional_authenticated_data)
        for value, checksum in (
            (plaintext, "plaintext_crc32c"),
            (aad, "additional_authenticated_data_crc32c"),
        ):
            if checksum in request and getattr(request, checksum) != crc32c_reference(value):
                context.abort(
                    grpc.StatusCode.INVALID_ARGUMENT, f"The checksum in field {checksum} did not match."
                )
        nonce = os.urandom(12)
        ciphertext = version.to_bytes(4, "big") + nonce + AESGCM(material).encrypt(nonce, plaintext, aad)
        return kms_v1.EncryptResponse(
            name=f"{request.name}/cryptoKeyVersions/{version}",
            ciphertext=ciphertext,
            ciphertext_crc32c=self._crc(ciphertext),
            verified_plaintext_crc32c="plaintext_crc32c" in request,
            verified_additional_authenticated_data_crc32c="additional_authenticated_data_crc32c" in request,
        )

    def _decrypt(self, request: Any, context: Any) -> Any:
        import grpc
        from cryptography.exceptions import InvalidTag
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
        from google.cloud import kms_v1

        self.calls.append("Decrypt")
        ciphertext, aad = bytes(request.ciphertext), bytes(request.additional_authenticated_data)
        if "ciphertext_crc32c" in request and request.ciphertext_crc32c != crc32c_reference(ciphertext):
            context.abort(
                grpc.StatusCode.INVALID_ARGUMENT, "The checksum in field ciphertext_crc32c did not match."
            )
        with self._lock:
            material = self._key(request.name, context).versions.get(int.from_bytes(ciphertext[:4], "big"))
        try:
            plaintext = AESGCM(material or bytes(32)).decrypt(ciphertext[4:16], ciphertext[16:], aad)
        except (InvalidTag, ValueError):
            plaintext = None
        if material is None or plaintext is None:
            context.abort(grpc.StatusCode.INVALID_ARGUMENT, "Decryption failed: the ciphertext is invalid.")
        return kms_v1.DecryptResponse(plaintext=plaintext, plaintext_crc32c=self._crc(plaintext))

    def _get_crypto_key(self, request: Any, context: Any) -> Any:
        from google.cloud import kms_v1

        self.calls.append("GetCryptoKey")
        with self._lock:
            key = self._key(request.name, context)
            primary = f"{request.name}/cryptoKeyVersions/{key.primary}"
        return kms_v1.CryptoKey(name=request.name, primary={"name": primary, "state": "ENABLED"})


@contextlib.contextmanager
def gcp_kms_fake() -> Iterator[GcpKmsFake]:
    """The Cloud KMS gRPC fake, served from a thread pool of this process."""
    fake = GcpKmsFake(free_port())
    fake.start()
    try:
        yield fake
    finally:
        fake.stop()


# --------------------------------------------------------------------------------------------
# Azure Key Vault (HTTPS fake)
# --------------------------------------------------------------------------------------------

AZURE_TENANT = "00000000-0000-0000-0000-0000000ced4b"


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64url(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


@dataclass
class _AzureKeyVersion:
    kty: str  # "RSA" or "oct-HSM"
    material: Any  # an RSA private key, or 32 AES bytes


class AzureKeyVaultFake:
    """Key Vault's REST protocol, enough for KeyClient.get_key and CryptographyClient
    wrap_key/unwrap_key: the 401 bearer challenge, GET /keys/NAME[/VERSION] (public JWK only;
    an oct-HSM key's GET carries no key material, as in Managed HSM), and POST
    /keys/NAME/VERSION/wrapkey|unwrapkey done for real (RSA-OAEP-256; A256KW for oct-HSM).
    `requests` logs (method, path) of every authenticated request."""

    RSA_KEY = "rsa-kek"
    OCT_KEY = "oct-kek"

    def __init__(self, pki: TestPki, port: int) -> None:
        self.pki = pki
        self.port = port
        self.token = "kv-" + secrets.token_urlsafe(16)
        self.keys: dict[str, dict[str, _AzureKeyVersion]] = {}  # name -> version -> key (ordered)
        self.key_types: dict[str, str] = {}
        self.requests: list[tuple[str, str]] = []
        self.unauthenticated = 0
        self._lock = threading.Lock()
        self._server: http.server.ThreadingHTTPServer | None = None
        self.add_key(self.RSA_KEY, "RSA")
        self.add_key(self.OCT_KEY, "oct-HSM")

    def kek_uri_for(self, name: str, port: int | None = None) -> str:
        return f"azure-kv://{LOOPBACK}:{port or self.port}/keys/{name}"

    @property
    def kek_uri(self) -> str:
        return self.kek_uri_for(self.RSA_KEY)

    @property
    def kms_config(self) -> dict[str, Any]:
        return self.config_for(self.kek_uri)

    def config_for(self, kek_uri: str) -> dict[str, Any]:
        return {
            "kek": kek_uri,
            "azure": {
                "static_token": self.token,
                "ca_file": str(self.pki.ca_cert),
                "verify_challenge_resource": False,
            },
        }

    def pointed_at(self, port: int) -> tuple[str, dict[str, Any]]:
        uri = self.kek_uri_for(self.RSA_KEY, port)
        return uri, self.config_for(uri)

    def add_key(self, name: str, kty: str) -> str:
        with self._lock:
            self.keys[name] = {}
            self.key_types[name] = kty
        return self.rotate(name)

    def rotate(self, name: str = RSA_KEY) -> str:
        """Add a new (now current) version of key `name`; the version id."""
        from cryptography.hazmat.primitives.asymmetric import rsa

        with self._lock:
            versions, kty = self.keys[name], self.key_types[name]
            material = (
                rsa.generate_private_key(public_exponent=65537, key_size=2048)
                if kty == "RSA"
                else secrets.token_bytes(32)
            )
            version = secrets.token_hex(16)
            versions[version] = _AzureKeyVersion(kty, material)
        return version

    def latest_version(self, name: str) -> str:
        with self._lock:
            return list(self.keys[name])[-1]

    def start(self) -> None:
        fake = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                return None

            def do_GET(self) -> None:
                fake._handle(self, "GET")

            def do_POST(self) -> None:
                fake._handle(self, "POST")

        server = http.server.ThreadingHTTPServer((LOOPBACK, self.port), Handler)
        server.daemon_threads = True
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.pki.server_cert, self.pki.server_key)
        server.socket = context.wrap_socket(server.socket, server_side=True)
        threading.Thread(target=server.serve_forever, name="azure-kv-fake", daemon=True).start()
        self._server = server

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    # -- protocol ------------------------------------------------------------------------------

    def _handle(self, handler: http.server.BaseHTTPRequestHandler, method: str) -> None:
        from cryptography.hazmat.primitives.keywrap import InvalidUnwrap

        length = int(handler.headers.get("Content-Length") or 0)
        body = handler.rfile.read(length) if length else b""
        path = handler.path.split("?", 1)[0]
        if handler.headers.get("Authorization") != f"Bearer {self.token}":
            self.unauthenticated += 1
            challenge = (
                f'Bearer authorization="https://login.microsoftonline.com/{AZURE_TENANT}", '
                'resource="https://vault.azure.net"'
            )
            self._send(handler, 401, {"error": {"code": "Unauthorized", "message": "no token"}}, challenge)
            return
        self.requests.append((method, path))
        match = re.fullmatch(r"/keys/([A-Za-z0-9-]+)(?:/([A-Za-z0-9]*))?(?:/(wrapkey|unwrapkey))?/?", path)
        if match is None:
            self._send(handler, 404, _kv_error("NotFound", "no such route"))
            return
        name, version, operation = match.group(1), match.group(2) or "", match.group(3)
        with self._lock:
            versions = self.keys.get(name)
            if versions and not version:
                version = list(versions)[-1]
            key = versions.get(version) if versions else None
        if key is None:
            self._send(handler, 404, _kv_error("KeyNotFound", f"A key with (name/id) {name} was not found"))
            return
        kid = f"https://{LOOPBACK}:{self.port}/keys/{name}/{version}"
        if method == "GET" and operation is None:
            self._send(handler, 200, {"key": _jwk(kid, key), "attributes": _attributes()})
        elif method == "POST" and operation is not None:
            try:
                request = json.loads(body)
                value = _unb64url(request["value"])
                result = _wrap_op(key, operation, str(request["alg"]), value)
            except (ValueError, KeyError, TypeError, binascii.Error, InvalidUnwrap):
                self._send(handler, 400, _kv_error("BadParameter", "The parameter is incorrect."))
                return
            self._send(handler, 200, {"kid": kid, "value": _b64url(result)})
        else:
            self._send(handler, 405, _kv_error("MethodNotAllowed", "method not allowed"))

    @staticmethod
    def _send(
        handler: http.server.BaseHTTPRequestHandler, status: int, body: Any, challenge: str | None = None
    ) -> None:
        raw = json.dumps(body).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json; charset=utf-8")
        handler.send_header("Content-Length", str(len(raw)))
        if challenge:
            handler.send_header("WWW-Authenticate", challenge)
        handler.end_headers()
        handler.wfile.write(raw)


def _kv_error(code: str, message: str) -> dict[str, Any]:
    return {"error": {"code": code, "message": message}}


def _attributes() -> dict[str, Any]:
    now = int(time.time())
    return {"enabled": True, "created": now, "updated": now, "recoveryLevel": "Recoverable+Purgeable"}


def _jwk(kid: str, key: _AzureKeyVersion) -> dict[str, Any]:
    ops = ["wrapKey", "unwrapKey", "encrypt", "decrypt"]
    if key.kty == "RSA":
        numbers = key.material.public_key().public_numbers()
        n = numbers.n.to_bytes((numbers.n.bit_length() + 7) // 8, "big")
        e = numbers.e.to_bytes((numbers.e.bit_length() + 7) // 8, "big")
        return {"kid": kid, "kty": "RSA", "key_ops": ops, "n": _b64url(n), "e": _b64url(e)}
    return {"kid": kid, "kty": "oct-HSM", "key_ops": ops}  # no "k": HSM keys never leave the HSM


def _wrap_op(key: _AzureKeyVersion, operation: str, alg: str, value: bytes) -> bytes:
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import padding
    from cryptography.hazmat.primitives.keywrap import aes_key_unwrap, aes_key_wrap

    if key.kty == "RSA" and alg == "RSA-OAEP-256":
        oaep = padding.OAEP(mgf=padding.MGF1(hashes.SHA256()), algorithm=hashes.SHA256(), label=None)
        if operation == "wrapkey":
            return bytes(key.material.public_key().encrypt(value, oaep))
        return bytes(key.material.decrypt(value, oaep))
    if key.kty == "oct-HSM" and alg == "A256KW":
        if operation == "wrapkey":
            return aes_key_wrap(key.material, value)
        return aes_key_unwrap(key.material, value)  # raises InvalidUnwrap
    raise ValueError(f"unsupported algorithm {alg} for {key.kty}")


@contextlib.contextmanager
def azure_kv_fake(pki: TestPki) -> Iterator[AzureKeyVaultFake]:
    """The Key Vault HTTPS fake (certificate from `pki`), served from a thread of this process,
    holding an RSA key (`rsa-kek`, the default KEK) and an oct-HSM key (`oct-kek`)."""
    fake = AzureKeyVaultFake(pki, free_port())
    fake.start()
    try:
        yield fake
    finally:
        fake.stop()
