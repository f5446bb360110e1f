"""The console's sessions (`gateway.authn.console_sessions`) on both stores, its settings, and
the pieces of its sign-in that need no browser: PKCE, the CSRF token, the origin check.

The browser runs against a real gateway in tests/e2e/test_console.py."""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import make_mocked_request
from sqlalchemy import delete, select

from cedarberg.catalog.store.statements import Sql
from cedarberg.gateway.authn.console_sessions import (
    ConsoleSessions,
    SessionStoreFullError,
    console_sessions,
    principal_document,
    principal_of,
)
from cedarberg.gateway.authn.key_store import KeyStore, open_key_store
from cedarberg.gateway.authn.oidc_signin import new_signin, pkce_challenge
from cedarberg.gateway.authn.principal import AuthMethod, Principal, PrincipalKind
from cedarberg.gateway.authz.operations import OPERATIONS
from cedarberg.gateway.config.console import ConsoleSettings
from cedarberg.gateway.config.settings import Settings, SettingsError, load_settings
from cedarberg.gateway.web.app import CONSOLE_ROUTES, create_app
from cedarberg.gateway.web.console.session_auth import csrf_token, same_origin
from cedarberg.gateway.web.keys import ROUTE_TABLE

_CLEAR = Sql(delete(console_sessions))
_ALL = Sql(select(console_sessions))

DANA = Principal(
    id="oidc:corp/dana",
    kind=PrincipalKind.USER,
    groups=frozenset({"corp/analysts", "analysts"}),
    auth_method=AuthMethod.JWT,
    attributes={"issuer": "https://idp.example"},
)
ETL = Principal(
    id="key:etl",
    kind=PrincipalKind.SERVICE,
    groups=frozenset({"etl"}),
    auth_method=AuthMethod.API_KEY,
    attributes={"api_key_id": "abcdefghijklmnop"},
    key_generation=3,
)


@pytest.fixture(params=["sqlite", "postgres"])
async def stores(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[tuple[KeyStore, KeyStore]]:
    """Two stores on one database, as two gateway workers have."""
    if request.param == "postgres":
        url = request.getfixturevalue("postgres_url")
    else:
        url = f"sqlite+aiosqlite:///{tmp_path / 'registry.db'}"
    first = await open_key_store(url)
    second = await open_key_store(url)
    async with first.writing() as conn:  # a shared PostgreSQL outlives one test
        await conn.execute(_CLEAR)
    yield first, second
    await first.close()
    await second.close()


def _settings(**values: Any) -> ConsoleSettings:
    return ConsoleSettings(enabled=True, **values)


# -- sessions -------------------------------------------------------------------------------------


async def test_a_session_opened_by_one_worker_is_found_by_another_and_ended_for_both(
    stores: tuple[KeyStore, KeyStore],
) -> None:
    mine, theirs = ConsoleSessions(stores[0], _settings()), ConsoleSessions(stores[1], _settings())
    secret = await mine.start(DANA)
    found = await theirs.find(secret)
    assert found is not None
    assert found.principal == DANA
    assert found.principal.attributes == DANA.attributes
    assert await theirs.end(secret) is True
    assert await mine.find(secret) is None
    assert await mine.end(secret) is False


async def test_the_table_holds_a_digest_of_the_secret_never_the_secret(
    stores: tuple[KeyStore, KeyStore],
) -> None:
    sessions = ConsoleSessions(stores[0], _settings())
    secret = await sessions.start(ETL)
    async with stores[0].reading() as conn:
        rows = (await conn.execute(_ALL)).rows
    assert [row.id_hash for row in rows] == [hashlib.sha256(secret.encode()).hexdigest()]
    assert secret not in repr(rows)
    assert len(secret) >= 43  # 256 bits, URL-safe base64


async def test_an_unknown_secret_opens_nothing(stores: tuple[KeyStore, KeyStore]) -> None:
    sessions = ConsoleSessions(stores[0], _settings())
    await sessions.start(DANA)
    assert await sessions.find("x" * 43) is None


async def test_an_idle_session_ends_and_a_used_one_lives_on(
    stores: tuple[KeyStore, KeyStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    sessions = ConsoleSessions(stores[0], _settings(idle_timeout_seconds=10, absolute_timeout_seconds=60))
    now = [1_000_000.0]
    monkeypatch.setattr(time, "time", lambda: now[0])
    used, idle = await sessions.start(DANA), await sessions.start(ETL)
    for _ in range(3):  # used every 8 s: never 10 s idle, though 24 s pass
        now[0] += 8
        assert await sessions.find(used) is not None
    assert await sessions.find(idle) is None  # 24 s without use
    now[0] += 10
    assert await sessions.find(used) is None


async def test_a_busy_session_still_ends_at_its_absolute_timeout(
    stores: tuple[KeyStore, KeyStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    sessions = ConsoleSessions(stores[0], _settings(idle_timeout_seconds=10, absolute_timeout_seconds=60))
    now = [2_000_000.0]
    monkeypatch.setattr(time, "time", lambda: now[0])
    secret = await sessions.start(DANA)
    for _ in range(7):
        now[0] += 8
        assert await sessions.find(secret) is not None
    now[0] += 5  # 61 s after sign-in
    assert await sessions.find(secret) is None


async def test_the_store_is_bounded_and_expired_sessions_make_room(
    stores: tuple[KeyStore, KeyStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    sessions = ConsoleSessions(stores[0], _settings(max_sessions=2, idle_timeout_seconds=10))
    now = [3_000_000.0]
    monkeypatch.setattr(time, "time", lambda: now[0])
    first = await sessions.start(DANA)
    await sessions.start(ETL)
    with pytest.raises(SessionStoreFullError):
        await sessions.start(DANA)
    assert await sessions.find(first) is not None  # refusing a new one ends none of the live ones
    now[0] += 11  # both idle now
    third = await sessions.start(DANA)
    assert await sessions.find(third) is not None
    async with stores[0].reading() as conn:
        assert len((await conn.execute(_ALL)).rows) == 1


# -- sign-ins at the issuer -----------------------------------------------------------------------


async def test_a_signin_state_serves_once_on_any_worker(stores: tuple[KeyStore, KeyStore]) -> None:
    mine, theirs = ConsoleSessions(stores[0], _settings()), ConsoleSessions(stores[1], _settings())
    state = await mine.begin_signin({"nonce": "n", "verifier": "v", "binding": "b"})
    assert await theirs.finish_signin(state) == {"nonce": "n", "verifier": "v", "binding": "b"}
    assert await mine.finish_signin(state) is None  # replayed callback
    assert await mine.find(state) is None  # a sign-in's state is no session


async def test_signins_in_progress_are_bounded_oldest_first_and_expire(
    stores: tuple[KeyStore, KeyStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    sessions = ConsoleSessions(stores[0], _settings(max_pending_signins=2, signin_timeout_seconds=30))
    now = [4_000_000.0]
    monkeypatch.setattr(time, "time", lambda: now[0])
    states = []
    for n in range(3):
        now[0] += 1
        states.append(await sessions.begin_signin({"n": n}))
    assert await sessions.finish_signin(states[0]) is None  # dropped to make room
    assert await sessions.finish_signin(states[1]) == {"n": 1}
    now[0] += 31
    assert await sessions.finish_signin(states[2]) is None  # too old
    live = await sessions.start(DANA)  # pending sign-ins never count against sessions
    assert await sessions.find(live) is not None


def test_a_principal_survives_the_session_row_whole() -> None:
    for principal in (DANA, ETL):
        kept = principal_of(principal_document(principal))
        assert kept == principal
        assert kept.attributes == principal.attributes
        assert kept.key_generation == principal.key_generation


# -- PKCE, CSRF, origin ---------------------------------------------------------------------------


def test_pkce_s256_matches_rfc_7636() -> None:
    # RFC 7636, appendix B.
    assert (
        pkce_challenge("dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk")
        == "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
    )
    start = new_signin()
    assert 43 <= len(start.verifier) <= 128
    assert start.challenge == pkce_challenge(start.verifier)
    assert new_signin().nonce != start.nonce


def test_the_csrf_token_is_the_sessions_own() -> None:
    first, second = "a" * 43, "b" * 43
    assert csrf_token(first) == csrf_token(first)
    assert csrf_token(first) != csrf_token(second)
    assert first not in csrf_token(first)


ORIGIN = "https://lake.example:8443"


@pytest.mark.parametrize(
    ("headers", "accepted"),
    [
        ({"Origin": ORIGIN}, True),
        ({"Origin": "null", "Sec-Fetch-Site": "same-origin"}, True),  # a no-referrer page's POST
        ({"Sec-Fetch-Site": "same-origin"}, True),
        ({"Referer": ORIGIN + "/console/catalog"}, True),
        ({"Origin": "https://evil.example"}, False),
        ({"Origin": "https://lake.example:8443.evil.example"}, False),
        ({"Origin": "null", "Sec-Fetch-Site": "cross-site"}, False),  # a sandboxed frame elsewhere
        ({"Origin": "null"}, False),
        ({"Sec-Fetch-Site": "same-site"}, False),
        ({"Referer": "https://lake.example:8443.evil.example/console/"}, False),
        ({"Origin": "https://evil.example", "Sec-Fetch-Site": "same-origin"}, False),
        ({}, False),
    ],
)
def test_a_form_must_come_from_the_consoles_origin(headers: dict[str, str], accepted: bool) -> None:
    request = make_mocked_request("POST", "/console/signout", headers=headers)
    assert same_origin(request, ORIGIN) is accepted


# -- settings and routes --------------------------------------------------------------------------


def _load(tmp_path: Path, document: str) -> Settings:
    path = tmp_path / "cedarberg.toml"
    path.write_text(document)
    return load_settings(path, {}, {})


def test_the_console_is_off_unless_enabled_and_then_needs_tls(tmp_path: Path) -> None:
    assert Settings().console.enabled is False
    table = create_app(Settings())[ROUTE_TABLE]
    assert table  # the catalog's routes are there
    assert not any(path.startswith("/console") for _method, path in table)
    with pytest.raises(SettingsError, match=r"console\.enabled needs TLS"):
        _load(tmp_path, "[console]\nenabled = true\n")
    cert, key = tmp_path / "c.pem", tmp_path / "k.pem"
    tls = f'[tls]\ncert_file = "{cert}"\nkey_file = "{key}"\n'
    settings = _load(tmp_path, tls + "[console]\nenabled = true\n")
    assert settings.console.origin(settings.host, settings.port) == "https://127.0.0.1:8181"
    with pytest.raises(SettingsError, match=r"console\.url must be set"):
        _load(tmp_path, 'host = "0.0.0.0"\n' + tls + "[console]\nenabled = true\n")


@pytest.mark.parametrize(
    ("console", "problem"),
    [
        ('url = "http://lake.example"', "https origin"),
        ('url = "https://lake.example/console"', "https origin"),
        ('oidc_issuer = "corp"', "go together"),
        ('oidc_issuer = "nobody"\nclient_id = "console"', "not the alias of an oidc issuer"),
        ('oidc_issuer = "corp"\nclient_id = "c"\nscopes = ["profile"]', "must include openid"),
        ("idle_timeout_seconds = 600\nabsolute_timeout_seconds = 300", "at least idle_timeout_seconds"),
        ("max_sessions = 0", "console.max_sessions"),
    ],
)
def test_console_settings_refuse_what_cannot_work(tmp_path: Path, console: str, problem: str) -> None:
    tls = f'[tls]\ncert_file = "{tmp_path}/c.pem"\nkey_file = "{tmp_path}/k.pem"\n'
    issuers = '[[oidc.issuers]]\nissuer = "https://idp.example"\nalias = "corp"\naudiences = ["cedarberg"]\n'
    with pytest.raises(SettingsError, match=re.escape(problem)):
        _load(tmp_path, tls + issuers + f"[console]\nenabled = true\n{console}\n")


def test_console_routes_are_session_routes_and_never_replayed(tmp_path: Path) -> None:
    """A replayed read's plan is keyed by the request's headers, not its cookies: a console page
    recorded as a plan would be answered to another session. No console operation is replayable,
    and every page and form is a session route."""
    (tmp_path / "c.pem").write_text("")
    settings = Settings.model_validate(
        {
            "tls": {"cert_file": str(tmp_path / "c.pem"), "key_file": str(tmp_path / "c.pem")},
            "console": {"enabled": True},
        }
    )
    table = create_app(settings)[ROUTE_TABLE]
    console = [route for route in table.values() if route.path.startswith("/console")]
    assert {(route.method, route.path) for route in console} == {(r.method, r.path) for r in CONSOLE_ROUTES}
    for route in console:
        spec = OPERATIONS[route.operation]
        assert not spec.replayable, route.path
        assert route.session == (not spec.public), route.path
    assert {route.operation for route in console if route.session} == {
        "useConsole",
        "undropObject",
        "readAuditLog",
        "showPolicies",
        "previewPolicies",
        "reviewAccess",
        "explainDecision",
        # Keys and the user directory: the admin API's own actions.
        "listApiKeys",
        "createApiKey",
        "getApiKey",
        "rotateApiKey",
        "revokeApiKey",
        "listDirectoryUsers",
        "putDirectoryUser",
        "deleteDirectoryUser",
    }
