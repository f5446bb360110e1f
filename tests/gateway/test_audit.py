"""The audit log (gateway/audit.py): JSON lines, destinations, and that secrets never get in."""

from __future__ import annotations

import base64
import datetime as dt
import io
import json
import logging
import secrets
import stat
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from cedarberg.gateway import audit as audit_module
from cedarberg.gateway.audit import (
    REDACTED,
    AuditEvent,
    AuditLog,
    EventKind,
    Outcome,
    Ruling,
    SecretScrubbingFilter,
    may_hold_secret,
    names_secret,
    scrub,
    scrub_text,
)
from cedarberg.gateway.authn.principal import AuthMethod, Principal, PrincipalKind
from cedarberg.gateway.config.audit import AuditSettings

FIELDS = [
    "time",
    "stream",
    "event",
    "request_id",
    "principal",
    "principal_kind",
    "auth_method",
    "actor",
    "client_address",
    "action",
    "resource",
    "decision",
    "policy_ids",
    "policy_version",
    "outcome",
    "status",
    "detail",
    "cedar_request",
]

ALICE = Principal(
    id="alice",
    kind=PrincipalKind.USER,
    groups=frozenset({"writers"}),
    auth_method=AuthMethod.JWT,
    attributes={"tls_subject": "CN=alice"},
)
POLICY_VERSION = "sha256:" + "0123456789abcdef" * 4


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _jwt() -> str:
    header = _b64(json.dumps({"alg": "ES256", "kid": "k1", "typ": "JWT"}).encode())
    payload = _b64(json.dumps({"sub": "alice", "iss": "https://idp.example", "exp": 2_000_000_000}).encode())
    return f"{header}.{payload}.{_b64(secrets.token_bytes(64))}"


def _api_key() -> str:
    return f"cbk_{secrets.token_hex(6)}_{secrets.token_urlsafe(32)}"


def _read(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


@pytest.fixture
def audit_file(tmp_path: Path) -> Path:
    return tmp_path / "logs" / "audit.jsonl"


@pytest.fixture
def audit(audit_file: Path) -> Iterator[AuditLog]:
    log = AuditLog.open(AuditSettings(destination=str(audit_file)))
    yield log
    log.close()


def test_lines_are_json_with_all_fields(audit: AuditLog, audit_file: Path) -> None:
    before = dt.datetime.now(dt.UTC)
    audit.record(
        AuditEvent(
            EventKind.DECISION,
            request_id="3f2b8c1e-5d4a-4f7b-9c1d-2e3f4a5b6c7d",
            principal=ALICE,
            action="LoadTable",
            resource='Cedarberg::Table::"default/sales.orders/line_items"',
            decision=Ruling.ALLOW,
            policy_ids=["writers-read", "writers-write"],
            policy_version=POLICY_VERSION,
            client_address="127.0.0.1",
        )
    )
    audit.record(
        AuditEvent(
            EventKind.MUTATION,
            request_id="req-2",
            principal=ALICE,
            action="UpdateTable",
            resource='Cedarberg::Table::"default/sales.orders/line_items"',
            outcome=Outcome.SUCCESS,
            status=200,
            policy_ids=["writers-write"],
            policy_version=POLICY_VERSION,
            detail={"updates": ["add-snapshot", "set-snapshot-ref"], "refs": ["main"]},
        )
    )
    audit.record(
        AuditEvent(
            EventKind.DECISION,
            request_id=None,
            principal=None,
            action="DropTable",
            resource='Cedarberg::Table::"default/ns/t"',
            decision="deny",
            policy_version=POLICY_VERSION,
        )
    )
    assert audit.flush()
    after = dt.datetime.now(dt.UTC)
    lines = audit_file.read_text().splitlines()
    assert len(lines) == 3
    records = [json.loads(line) for line in lines]
    for record in records:
        assert list(record) == FIELDS
        assert record["time"].endswith("Z")
        when = dt.datetime.fromisoformat(record["time"])
        assert when.utcoffset() == dt.timedelta(0)
        assert before - dt.timedelta(seconds=1) <= when <= after
    decision, mutation, denied = records
    assert decision == decision | {
        "stream": "audit",
        "event": "decision",
        "request_id": "3f2b8c1e-5d4a-4f7b-9c1d-2e3f4a5b6c7d",
        "principal": "alice",
        "principal_kind": "user",
        "auth_method": "jwt",
        "client_address": "127.0.0.1",
        "action": "LoadTable",
        "resource": 'Cedarberg::Table::"default/sales.orders/line_items"',
        "decision": "allow",
        "policy_ids": ["writers-read", "writers-write"],
        "policy_version": POLICY_VERSION,
        "outcome": None,
        "status": None,
        "detail": None,
    }
    assert mutation["event"] == "mutation"
    assert mutation["outcome"] == "success"
    assert mutation["status"] == 200
    assert mutation["decision"] == "allow"
    assert mutation["detail"] == {"updates": ["add-snapshot", "set-snapshot-ref"], "refs": ["main"]}
    assert denied["decision"] == "deny"
    assert denied["principal"] is None
    assert denied["auth_method"] is None
    assert denied["policy_ids"] == []


def test_file_is_private_and_appended(audit_file: Path) -> None:
    for n in range(2):
        log = AuditLog.open(AuditSettings(destination=str(audit_file)))
        log.record(
            AuditEvent(
                EventKind.MUTATION,
                request_id=f"r{n}",
                principal=ALICE,
                action="CreateNamespace",
                resource="ns",
                outcome="success",
            )
        )
        log.close()
        log.close()  # idempotent
    assert stat.S_IMODE(audit_file.stat().st_mode) == 0o600
    assert [r["request_id"] for r in _read(audit_file)] == ["r0", "r1"]
    with pytest.raises(RuntimeError):
        log.record(
            AuditEvent(
                EventKind.MUTATION,
                request_id="late",
                principal=None,
                action="x",
                resource="y",
                outcome="failure",
            )
        )


def test_stdout_destination(capsys: pytest.CaptureFixture[str]) -> None:
    log = AuditLog.open(AuditSettings())
    log.record(
        AuditEvent(
            EventKind.DECISION,
            request_id="r-stdout",
            principal=ALICE,
            action="ListNamespaces",
            resource='Cedarberg::Warehouse::"default"',
            decision="allow",
            policy_ids=["p1"],
            policy_version=POLICY_VERSION,
        )
    )
    log.close()
    [line] = capsys.readouterr().out.splitlines()
    record = json.loads(line)
    assert list(record) == FIELDS
    assert record["request_id"] == "r-stdout"


async def test_recording_from_the_loop_and_threads(tmp_path: Path) -> None:
    path = tmp_path / "audit.jsonl"
    # A tiny queue forces back-pressure: recording waits for the writer instead of dropping records.
    log = AuditLog.open(AuditSettings(destination=str(path), queue_size=2))

    def worker(name: str) -> None:
        for i in range(300):
            log.record(
                AuditEvent(
                    EventKind.MUTATION,
                    request_id=f"{name}-{i}",
                    principal=ALICE,
                    action="CommitTable",
                    resource="t",
                    outcome="success",
                )
            )

    threads = [threading.Thread(target=worker, args=(f"t{n}",)) for n in range(3)]
    for thread in threads:
        thread.start()
    for i in range(300):
        log.record(
            AuditEvent(
                EventKind.DECISION,
                request_id=f"loop-{i}",
                principal=ALICE,
                action="LoadTable",
                resource="t",
                decision="allow",
                policy_version=POLICY_VERSION,
            )
        )
    for thread in threads:
        thread.join()
    assert await log.aflush()
    await log.aclose()
    ids = [r["request_id"] for r in _read(path)]
    assert len(ids) == 1200
    for name in ("loop", "t0", "t1", "t2"):
        assert [x for x in ids if x.startswith(f"{name}-")] == [f"{name}-{i}" for i in range(300)]


def test_reopen_after_rotation(audit: AuditLog, audit_file: Path) -> None:
    audit.record(
        AuditEvent(
            EventKind.MUTATION,
            request_id="before",
            principal=ALICE,
            action="a",
            resource="r",
            outcome="success",
        )
    )
    audit.flush()
    rotated = audit_file.with_suffix(".1")
    audit_file.rename(rotated)
    audit.reopen()
    audit.record(
        AuditEvent(
            EventKind.MUTATION,
            request_id="after",
            principal=ALICE,
            action="a",
            resource="r",
            outcome="success",
        )
    )
    audit.flush()
    assert [r["request_id"] for r in _read(rotated)] == ["before"]
    assert [r["request_id"] for r in _read(audit_file)] == ["after"]


def test_write_failure_is_reported(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="cedarberg.audit")
    log = AuditLog.open(AuditSettings(destination="/dev/full"))  # every write fails with ENOSPC
    assert log.healthy
    log.record(
        AuditEvent(
            EventKind.MUTATION, request_id="r", principal=ALICE, action="a", resource="r", outcome="success"
        )
    )
    log.flush()
    log.close()
    assert not log.healthy
    assert any("audit log write to /dev/full failed" in r.getMessage() for r in caplog.records)


def test_unusable_destination_fails_at_open(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(OSError):
        AuditLog.open(AuditSettings(destination=str(tmp_path / "file" / "audit.jsonl")))


@pytest.mark.parametrize("bad", [{"destination": "audit.jsonl"}, {"destination": ""}, {"queue_size": 0}])
def test_bad_settings(bad: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        AuditSettings.model_validate(bad)


def test_secrets_never_written(audit: AuditLog, audit_file: Path) -> None:
    jwt, key, other_key, raw_secret = _jwt(), _api_key(), _api_key(), secrets.token_urlsafe(32)
    basic = base64.b64encode(f"k_id:{raw_secret}".encode()).decode()
    pem_body = "MIGHAgEAMBMGByqGSM49AgEGCCqGSM49AwEHBG0wawIBAQQg"
    pem = f"-----BEGIN PRIVATE KEY-----\n{pem_body}\n-----END PRIVATE KEY-----"
    secrets_used = [
        jwt,
        key,
        other_key,
        raw_secret,
        basic,
        pem_body,
    ]
    secrets_used += [jwt.split(".")[2], key.split("_", 2)[2]]
    audit.record(
        AuditEvent(
            EventKind.DECISION,
            request_id=f"Bearer {jwt}",
            principal=Principal(
                id=key, kind=PrincipalKind.SERVICE, groups=frozenset(), auth_method=AuthMethod.API_KEY
            ),
            action=f"LoadTable {jwt}",
            resource=f"X-Api-Key: {other_key}",
            decision="deny",
            policy_ids=[f"token={raw_secret}"],
            policy_version=jwt,
            client_address=raw_secret,
            detail={
                "headers": {
                    "Authorization": f"Basic {basic}",
                    "X-Api-Key": key,
                    "Accept": "application/json",
                },
                "form": (
                    f"grant_type=client_credentials&client_id=k_id&client_secret={raw_secret}&scope=catalog"
                ),
                "body": json.dumps({"client_secret": raw_secret, "token": jwt, "name": "orders"}),
                "client_secret": raw_secret,
                "password": 12345678,
                "pem": pem,
                "raw": raw_secret,
                "nested": [[{"refresh_token": raw_secret}], f"see {key} and {jwt}"],
            },
        )
    )
    audit.record(
        AuditEvent(
            EventKind.MUTATION,
            request_id="r2",
            principal=ALICE,
            action="CreateApiKey",
            resource='Cedarberg::ApiKey::"k_7f3a"',
            outcome="success",
            detail=f"issued {key} for alice",
        )
    )
    audit.flush()
    text = audit_file.read_text()
    for secret in secrets_used:
        assert secret not in text
    assert "12345678" not in text
    decision, mutation = _read(audit_file)
    assert decision["request_id"] == f"Bearer {REDACTED}"
    assert decision["principal"] == f"cbk_{REDACTED}"
    assert decision["detail"]["headers"] == {
        "Authorization": REDACTED,
        "X-Api-Key": REDACTED,
        "Accept": "application/json",
    }
    assert decision["detail"]["form"] == (
        f"grant_type=client_credentials&client_id=k_id&client_secret={REDACTED}&scope=catalog"
    )
    assert json.loads(decision["detail"]["body"])["name"] == "orders"
    assert mutation["resource"] == 'Cedarberg::ApiKey::"k_7f3a"'
    assert mutation["action"] == "CreateApiKey"
    assert mutation["detail"] == f"issued cbk_{REDACTED} for alice"


@pytest.mark.parametrize(
    "harmless",
    [
        "3f2b8c1e-5d4a-4f7b-9c1d-2e3f4a5b6c7d",
        POLICY_VERSION,
        'Cedarberg::Table::"default/sales.orders/customer_lifetime_value_by_region_2024"',
        "Customer2024AnnualRevenueByRegionSummaryV2Final",  # structured fields keep long names
        "s3://warehouse-bucket/sales/orders/metadata/00001-8c1e.metadata.json",
        "add-snapshot",
        "CreateApiKey",
        "token endpoint",
    ],
)
def test_structured_values_survive(harmless: str) -> None:
    assert scrub(harmless, free_form=False) == harmless


def test_scrub_text_cases() -> None:
    assert scrub_text("Authorization: Bearer abc.def-ghi") == f"Authorization: Bearer {REDACTED}"
    assert scrub_text("authorization: basic dXNlcjpwYXNz") == f"authorization: basic {REDACTED}"
    assert scrub_text("eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.") == REDACTED  # alg none, empty signature
    assert scrub_text('{"access_token": "opaque-123"}') == f'{{"access_token": "{REDACTED}"}}'
    assert scrub_text("password = hunter2") == f"password = {REDACTED}"
    assert scrub_text("x" * 10_000).endswith("...[truncated]")
    assert len(scrub_text("x" * 10_000)) < 2100
    # Free-form text loses long random-looking runs; hex digests and plain words stay.
    random_run = "Zq3xR8mN2pL7vK4tY9wB6cH1jF5gD0sA-_x"
    assert scrub_text(f"key {random_run} end") == f"key {REDACTED} end"
    assert scrub(random_run, free_form=False) == random_run
    assert scrub_text("a" * 40) == "a" * 40
    assert scrub_text("f" * 64 + "0123") == "f" * 64 + "0123"
    assert scrub({"Set-Cookie": "session=abc", 3: None, "n": 1.5, "ok": True}) == {
        "Set-Cookie": REDACTED,
        "3": None,
        "n": 1.5,
        "ok": True,
    }


def _every_pattern(text: str) -> str:
    """`text` after every scrubbing pattern, applied without the screen."""
    for pattern, replacement in audit_module._PATTERNS:
        text = pattern.sub(replacement, text)
    return text


# Fragments of what each pattern takes away, in several spellings, mixed into arbitrary text.
_SECRET_FRAGMENTS = [
    "Bearer abcd.efgh",
    "BASIC dXNlcjpwYXNz",
    "bEaReR\tqwerty12",
    "cbk_k1_s3cr3t",
    "cbk_",
    "eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.",
    "eyAbcdefgh.ij",
    "TOKENS=abc",
    "Client_Secret = x",
    '"access_token": "v"',
    "'api-key':'v'",
    "PRIVATE_KEYS  =v",
    'id_tokens"\t:"v',
    "cookie=a",
    "-----BEGIN RSA PRIVATE KEY-----\nMIIE\n-----END RSA PRIVATE KEY-----",
    "-----BEGIN EC PRIVATE KEY-----x",
    "passwd=",
    "Pwd ='x'",
    "credentials=1",
    "authorization: Bearer z9z9",
    "apikey=1",
    # Non-ASCII case variants the expressions match under IGNORECASE (long s, Kelvin sign).
    "\u017fecret=x",
    "to\u212aen=v",
    "ba\u017fic dXNlcjpwYXNz",
]


@settings(max_examples=400, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.sampled_from(_SECRET_FRAGMENTS), st.text(max_size=12), st.sampled_from(list(" =:'\"_-."))
        ),
        max_size=8,
    )
)
def test_the_screen_never_spares_a_text_a_pattern_would_change(parts: list[str]) -> None:
    text = "".join(parts)
    assert scrub_text(text, free_form=False, max_length=None) == _every_pattern(text)


@settings(max_examples=400, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.sampled_from([*_SECRET_FRAGMENTS, "Signature", "PASSWORD", "api-key", "\u017fignature"]),
            st.text(max_size=12),
        ),
        max_size=6,
    )
)
def test_a_key_names_a_secret_exactly_when_the_expression_finds_one(parts: list[str]) -> None:
    key = "".join(parts)
    assert names_secret(key) == (audit_module._SECRET_KEY.search(key) is not None)
    if not may_hold_secret(key):
        assert scrub_text(key, free_form=False, max_length=None) == key
        assert not names_secret(key)


@pytest.mark.parametrize("fragment", _SECRET_FRAGMENTS)
def test_every_secret_fragment_is_scrubbed_through_the_screen(fragment: str) -> None:
    changed = _every_pattern(f"x {fragment} y")
    if changed != f"x {fragment} y":  # (a bare "cbk_" or "passwd=" is already what it leaves)
        assert scrub_text(f"x {fragment} y", free_form=False) == changed


def _fail(message: str) -> None:
    raise ValueError(message)


def test_logging_filter_scrubs_messages_and_tracebacks() -> None:
    jwt, key = _jwt(), _api_key()
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(SecretScrubbingFilter())
    logger = logging.getLogger("cedarberg.test-audit-filter")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.warning("token refused: %s (key %s)", jwt, key)
        logger.warning("headers %r", {"Authorization": f"Bearer {jwt}"})
        try:
            _fail(f"bad api key {key}")
        except ValueError:
            logger.exception("while checking %s", f"client_secret={key}")
    finally:
        logger.removeHandler(handler)
    text = stream.getvalue()
    assert jwt not in text
    assert key not in text
    assert key.split("_", 2)[2] not in text
    assert "token refused" in text
    assert "ValueError: bad api key cbk_[REDACTED]" in text
