"""TLS (gateway/tls.py) against a real aiohttp server on loopback, with certificates made by
tests/support/tls.py; the PKCS12 truststore is checked with cryptography, keytool and a Java
HTTPS client (as Spark will use it)."""

from __future__ import annotations

import asyncio
import logging
import shutil
import ssl
import warnings
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from cryptography.hazmat.primitives.serialization import pkcs12
from pydantic import ValidationError

from cedarberg.gateway.config.tls import TlsSettings
from cedarberg.gateway.tls import (
    TLS12_CIPHERS,
    PlainHttpRefusedError,
    TlsConfigError,
    check_plain_http_allowed,
    is_loopback,
    peer_subject,
    server_ssl_context,
)
from tests.support.tls import TestPki, make_pki

Serve = Callable[[ssl.SSLContext | None], Coroutine[Any, Any, str]]


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> TestPki:
    return make_pki(tmp_path_factory.mktemp("pki"))


async def _whoami(request: web.Request) -> web.Response:
    subject = peer_subject(request.transport)
    ssl_object = request.transport.get_extra_info("ssl_object") if request.transport else None
    return web.json_response(
        {
            "subject": subject,
            "version": ssl_object.version() if ssl_object else None,
            "cipher": ssl_object.cipher()[0] if ssl_object else None,
        }
    )


@pytest.fixture
async def serve() -> AsyncIterator[Serve]:
    """Start an aiohttp server on 127.0.0.1 with the given context; returns its base URL."""
    runners: list[web.AppRunner] = []

    async def start(ctx: ssl.SSLContext | None) -> str:
        app = web.Application()
        app.router.add_get("/whoami", _whoami)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        runners.append(runner)
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx)
        await site.start()
        port = runner.addresses[0][1]
        return f"{'https' if ctx else 'http'}://127.0.0.1:{port}"

    yield start
    for runner in runners:
        await runner.cleanup()


async def _get(url: str, client_ctx: ssl.SSLContext | None) -> dict[str, Any]:
    async with (
        aiohttp.ClientSession() as session,
        session.get(f"{url}/whoami", ssl=client_ctx if client_ctx else False) as resp,
    ):
        assert resp.status == 200
        body: dict[str, Any] = await resp.json()
        return body


def _settings(pki: TestPki, **extra: Any) -> TlsSettings:
    return TlsSettings(cert_file=pki.server_cert, key_file=pki.server_key, **extra)


def _legacy_client(pki: TestPki, version: ssl.TLSVersion) -> ssl.SSLContext:
    """A client that speaks only ``version`` (OpenSSL security level 0 so it may offer TLS 1.1)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # TLSv1_1 is deprecated, on purpose
        ctx = pki.client_context(minimum_version=version, maximum_version=version)
    ctx.set_ciphers("DEFAULT:@SECLEVEL=0")
    return ctx


async def test_tls12_and_tls13_accepted(pki: TestPki, serve: Serve) -> None:
    url = await serve(server_ssl_context(_settings(pki)))
    got12 = await _get(url, pki.client_context(maximum_version=ssl.TLSVersion.TLSv1_2))
    assert got12["version"] == "TLSv1.2"
    assert got12["cipher"] in TLS12_CIPHERS.split(":")
    assert got12["subject"] is None
    got13 = await _get(url, pki.client_context())
    assert got13["version"] == "TLSv1.3"


async def test_tls11_refused(pki: TestPki, serve: Serve) -> None:
    legacy = _legacy_client(pki, ssl.TLSVersion.TLSv1_1)
    # Control: the same client does get through to a server that still allows TLS 1.1, so the
    # refusal below is the gateway's policy, not a client that cannot speak TLS 1.1 at all.
    permissive = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        permissive.minimum_version = ssl.TLSVersion.TLSv1_1
    permissive.set_ciphers("DEFAULT:@SECLEVEL=0")
    permissive.load_cert_chain(pki.server_cert, pki.server_key)
    assert (await _get(await serve(permissive), legacy))["version"] == "TLSv1.1"

    url = await serve(server_ssl_context(_settings(pki)))
    with pytest.raises(aiohttp.ClientError):
        await _get(url, legacy)


async def test_minimum_version_13(pki: TestPki, serve: Serve) -> None:
    url = await serve(server_ssl_context(_settings(pki, minimum_version="1.3")))
    with pytest.raises(aiohttp.ClientError):
        await _get(url, pki.client_context(maximum_version=ssl.TLSVersion.TLSv1_2))
    assert (await _get(url, pki.client_context()))["version"] == "TLSv1.3"


async def test_mtls_required(pki: TestPki, serve: Serve, tmp_path: Path) -> None:
    ctx = server_ssl_context(_settings(pki, client_ca_file=pki.ca_cert, require_client_cert=True))
    url = await serve(ctx)
    alice = pki.issue_client("alice", organizational_unit="Data Platform")
    for version in (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3):
        got = await _get(url, pki.client_context(alice, maximum_version=version))
        assert got["subject"] == alice.subject == "CN=alice,OU=Data Platform,O=Cedarberg Tests"
    # No certificate: refused in the handshake.
    for version in (ssl.TLSVersion.TLSv1_2, ssl.TLSVersion.TLSv1_3):
        with pytest.raises(aiohttp.ClientError):
            await _get(url, pki.client_context(maximum_version=version))
    # A certificate from another CA: refused too.
    rogue = make_pki(tmp_path / "rogue", ca_name="Rogue CA").issue_client("alice")
    with pytest.raises(aiohttp.ClientError):
        await _get(url, pki.client_context(rogue))


async def test_mtls_optional(pki: TestPki, serve: Serve, tmp_path: Path) -> None:
    url = await serve(server_ssl_context(_settings(pki, client_ca_file=pki.ca_cert)))
    assert (await _get(url, pki.client_context()))["subject"] is None
    bob = pki.issue_client("bob")
    assert (await _get(url, pki.client_context(bob)))["subject"] == "CN=bob,O=Cedarberg Tests"
    # Optional does not mean unverified: a certificate that does not verify is refused.
    rogue = make_pki(tmp_path / "rogue", ca_name="Rogue CA").issue_client("bob")
    with pytest.raises(aiohttp.ClientError):
        await _get(url, pki.client_context(rogue))


async def test_subject_only_when_verified(pki: TestPki, serve: Serve) -> None:
    # Without a client CA the server does not ask for (or verify) client certificates.
    url = await serve(server_ssl_context(_settings(pki)))
    assert (await _get(url, pki.client_context(pki.issue_client("carol"))))["subject"] is None
    plain = await serve(None)
    assert (await _get(plain, None))["subject"] is None
    assert peer_subject(None) is None


def test_bad_files_are_clear_errors(pki: TestPki, tmp_path: Path) -> None:
    with pytest.raises(TlsConfigError, match="cert_file"):
        server_ssl_context(TlsSettings(cert_file=tmp_path / "missing.pem", key_file=pki.server_key))
    other_key = make_pki(tmp_path / "other").server_key
    with pytest.raises(TlsConfigError) as info:
        server_ssl_context(TlsSettings(cert_file=pki.server_cert, key_file=other_key))
    assert "PRIVATE KEY" not in str(info.value)
    garbage = tmp_path / "garbage.pem"
    garbage.write_text("not a pem")
    with pytest.raises(TlsConfigError, match="client CA"):
        server_ssl_context(_settings(pki, client_ca_file=garbage))
    with pytest.raises(TlsConfigError):
        server_ssl_context(TlsSettings())


@pytest.mark.parametrize(
    "bad",
    [
        {"cert_file": "a.pem"},
        {"key_file": "a.pem"},
        {"client_ca_file": "ca.pem"},
        {"cert_file": "a.pem", "key_file": "k.pem", "require_client_cert": True},
        {"cert_file": "a.pem", "key_file": "k.pem", "minimum_version": "1.1"},
        {"tls_version": "1.2"},
    ],
)
def test_inconsistent_settings_refused(bad: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        TlsSettings.model_validate(bad)


def test_key_password_is_secret(pki: TestPki) -> None:
    settings = _settings(pki, key_password="hunter2-pass")
    assert "hunter2-pass" not in repr(settings)
    assert "hunter2-pass" not in str(settings.model_dump())


def test_plain_http_rules(caplog: pytest.LogCaptureFixture, pki: TestPki) -> None:
    caplog.set_level(logging.WARNING, logger="cedarberg.tls")
    for host in ("127.0.0.1", "127.8.9.10", "::1", "[::1]", "localhost"):
        assert is_loopback(host)
        check_plain_http_allowed(host, TlsSettings())
    assert caplog.records
    assert all(r.levelno == logging.WARNING and "PLAIN HTTP" in r.getMessage() for r in caplog.records)
    caplog.clear()

    for host in ("0.0.0.0", "::", "", "10.1.2.3", "gateway.example.com"):
        assert not is_loopback(host)
        with pytest.raises(PlainHttpRefusedError):
            check_plain_http_allowed(host, TlsSettings())
    assert not caplog.records

    check_plain_http_allowed("0.0.0.0", TlsSettings(allow_plain_http=True))
    assert [r.levelno for r in caplog.records] == [logging.WARNING]
    assert "UNSAFE PLAIN HTTP" in caplog.records[0].getMessage()
    caplog.clear()

    # With TLS configured there is nothing to allow and nothing to warn about.
    check_plain_http_allowed("0.0.0.0", _settings(pki))
    assert not caplog.records


def test_truststore_loads(pki: TestPki) -> None:
    data = pki.truststore.read_bytes()
    store = pkcs12.load_pkcs12(data, pki.truststore_password.encode())
    assert store.key is None
    assert store.cert is None
    [entry] = store.additional_certs
    assert entry.friendly_name == b"cedarberg-test-ca"
    assert entry.certificate.subject.rfc4514_string() == "CN=Cedarberg Test CA,O=Cedarberg Tests"
    with pytest.raises(ValueError):
        pkcs12.load_pkcs12(data, b"wrong password")
    assert pki.java_options().split() == [
        f"-Djavax.net.ssl.trustStore={pki.truststore}",
        "-Djavax.net.ssl.trustStoreType=PKCS12",
        f"-Djavax.net.ssl.trustStorePassword={pki.truststore_password}",
    ]


def _java_tool(name: str) -> str:
    path = shutil.which(name)
    assert path, f"{name} not found: make test installs Java 17 (scripts/install-test-deps.sh)"
    return path


async def _run(*argv: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        *argv, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT
    )
    out, _ = await asyncio.wait_for(proc.communicate(), timeout=120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(errors="replace")


_JAVA_PROBE = """
import java.net.URI;
import java.net.http.HttpClient;
import java.net.http.HttpRequest;
import java.net.http.HttpResponse;

public class Probe {
    public static void main(String[] args) throws Exception {
        HttpClient client = HttpClient.newHttpClient();
        HttpResponse<String> resp = client.send(
            HttpRequest.newBuilder(URI.create(args[0])).build(), HttpResponse.BodyHandlers.ofString());
        System.out.println("STATUS " + resp.statusCode() + " " + resp.body());
    }
}
"""


async def test_java_trusts_the_truststore(pki: TestPki, serve: Serve, tmp_path: Path) -> None:
    """keytool sees a trusted certificate entry, and a Java HTTPS client with the JVM flags Spark
    gets (`java_options`) connects to the gateway's TLS context without any other trust setup."""
    code, out = await _run(
        _java_tool("keytool"),
        "-list",
        "-keystore",
        str(pki.truststore),
        "-storetype",
        "PKCS12",
        "-storepass",
        pki.truststore_password,
    )
    assert code == 0, out
    assert "trustedCertEntry" in out

    url = await serve(server_ssl_context(_settings(pki)))
    probe = tmp_path / "Probe.java"
    probe.write_text(_JAVA_PROBE)
    java = _java_tool("java")
    code, out = await _run(java, *pki.java_options().split(), str(probe), f"{url}/whoami")
    assert code == 0, out
    assert "STATUS 200" in out
    # Without the truststore Java refuses the test CA: the flags are what makes it work.
    code, out = await _run(java, str(probe), f"{url}/whoami")
    assert code != 0
    assert "PKIX" in out or "SSLHandshakeException" in out
