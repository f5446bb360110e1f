"""Deciding audited decisions again under a candidate policy set (gateway/authz/redecide.py,
preview.py), from the Cedar request each decision record carries (gateway/decision_record.py),
read backwards from the audit file (gateway/audit_query.py `records_from_end`).

The records here are written by the real audit log from real decisions of the bundled policies,
built as the pipeline builds them (`verdicts.decide`); tests/gateway/test_policy_preview.py does
the same through a running gateway.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cedarberg.gateway import decision_record
from cedarberg.gateway.audit import AuditEvent, AuditLog, EventKind, Outcome, Ruling
from cedarberg.gateway.audit_query import records_from_end
from cedarberg.gateway.authn.principal import AuthMethod, Principal, PrincipalKind
from cedarberg.gateway.authn.subject_token import JWT_TOKEN_TYPE, UNSIGNED_ISSUER, DelegationFacts
from cedarberg.gateway.authz.context import RequestContext
from cedarberg.gateway.authz.engine import PolicyEngine
from cedarberg.gateway.authz.entities import Resource, principal_uid, table_resource
from cedarberg.gateway.authz.errors import ResourceError
from cedarberg.gateway.authz.preview import SuppliedFixture, candidate_sources, preview
from cedarberg.gateway.authz.redecide import (
    DEADLINE,
    MALFORMED,
    NOT_RECORDED,
    OMITTED,
    SCRUBBED,
    DecisionWindow,
    redecide,
)
from cedarberg.gateway.config.audit import AuditSettings
from cedarberg.gateway.config.authz import BUNDLED_POLICY_DIR
from cedarberg.gateway.decision_record import MAX_REQUEST_BYTES, decided_request
from cedarberg.gateway.web.delegation_judge import CedarDelegationJudge

GRANTS = "grants.cedar"
READERS_PERMIT = """@id("readers-read-granted")
permit (principal, action in Cedarberg::Action::"read", resource)
when { principal.groups.containsAny(resource.readers) };
"""
SALES = {"cedarberg.readers": "bi", "cedarberg.writers": "etl"}
ORDERS = table_resource("default", ["sales"], "orders", [SALES])


def _principal(name: str, *groups: str, **attributes: str) -> Principal:
    return Principal(
        id=f"key:{name}",
        kind=PrincipalKind.SERVICE,
        groups=frozenset(groups),
        auth_method=AuthMethod.API_KEY,
        attributes={"api_key_id": f"{name:a<16}"[:16], **attributes},
    )


ANALYST = _principal("analyst", "bi")
WRITER = _principal("writer", "etl")
STRANGER = _principal("stranger", "nobody")


@pytest.fixture(scope="module")
def current() -> PolicyEngine:
    engine = PolicyEngine(BUNDLED_POLICY_DIR)
    engine.load()
    return engine


def _candidate(current: PolicyEngine, **files: str) -> PolicyEngine:
    assert current.active is not None
    engine = PolicyEngine(current.directory, entity_cache_size=0, decision_cache_size=0)
    engine.load_sources({**current.active.sources, **files})
    return engine


def _without_readers(current: PolicyEngine) -> str:
    assert current.active is not None
    grants = current.active.sources[GRANTS]
    assert READERS_PERMIT in grants
    return grants.replace(READERS_PERMIT, "")


class Recorder:
    """Decides as the pipeline does and writes the decision's audit record."""

    def __init__(self, engine: PolicyEngine, path: Path) -> None:
        self.engine = engine
        self.path = path
        self.audit = AuditLog.open(AuditSettings(destination=str(path)))

    def decide(
        self, principal: Principal, action: str, resource: Resource = ORDERS, request_id: str | None = None
    ) -> bool:
        context = RequestContext.of(principal, "127.0.0.1")
        decision = self.engine.decide(principal, action, resource, context)
        self.audit.record(
            AuditEvent(
                EventKind.DECISION,
                request_id=request_id or f"{principal.id}-{action}",
                principal=principal,
                action=action,
                resource=str(resource.uid),
                decision=Ruling.ALLOW if decision.allowed else Ruling.DENY,
                policy_ids=decision.policy_ids,
                policy_version=decision.version,
                client_address="127.0.0.1",
                cedar_request=decided_request(
                    principal_uid(principal),
                    self.engine.principal_json(principal),
                    resource.uid,
                    resource.entities_json,
                    context.to_cedar(),
                ),
            )
        )
        return decision.allowed

    def records(self) -> list[dict[str, Any]]:
        assert self.audit.flush()
        return list(records_from_end(self.path, 1024**2))


@pytest.fixture
def recorder(current: PolicyEngine, tmp_path: Path) -> Iterator[Recorder]:
    made = Recorder(current, tmp_path / "audit.jsonl")
    yield made
    made.audit.close()


def test_a_removed_grant_flips_exactly_the_decisions_it_made(
    current: PolicyEngine, recorder: Recorder
) -> None:
    assert recorder.decide(ANALYST, "loadTable")  # readers-read-granted
    assert recorder.decide(WRITER, "loadTable")  # writers-read-granted
    assert recorder.decide(WRITER, "updateTable")
    assert not recorder.decide(STRANGER, "loadTable")
    candidate = _candidate(current, **{GRANTS: _without_readers(current)})

    outcome = redecide(current, candidate, DecisionWindow(recorder.records(), limit=10))

    assert outcome.complete
    assert [(f.principal, f.action, f.request_id) for f in outcome.flips] == [
        ("key:analyst", "loadTable", "key:analyst-loadTable")
    ]
    [flip] = outcome.flips
    assert flip.recorded == "allow"
    assert (flip.current.allowed, flip.current.policy_ids) == (True, ("readers-read-granted",))
    assert (flip.candidate.allowed, flip.candidate.policy_ids) == (False, ())
    tally = outcome.tally
    assert (tally.examined, tally.re_decided, tally.unchanged) == (4, 4, 3)
    assert (tally.allow_to_deny, tally.deny_to_allow, tally.current_differs_from_recorded) == (1, 0, 0)
    assert not tally.not_re_decidable
    # What the candidate predicts is what it decides once it is the set deciding live requests.
    assert not candidate.decide(ANALYST, "loadTable", ORDERS, RequestContext.of(ANALYST, "127.0.0.1")).allowed


def test_an_added_permit_flips_denials_to_allows(current: PolicyEngine, recorder: Recorder) -> None:
    assert not recorder.decide(STRANGER, "loadTable")
    assert not recorder.decide(STRANGER, "updateTable")
    opened = '@id("nobody-loads-orders")\npermit (principal in Cedarberg::Group::"nobody", action == Cedarberg::Action::"loadTable", resource == Cedarberg::Table::"default/sales/orders");\n'  # noqa: E501
    candidate = _candidate(current, **{"opened.cedar": opened})

    outcome = redecide(current, candidate, DecisionWindow(recorder.records(), limit=10))

    assert [(f.principal, f.action, f.candidate.policy_ids) for f in outcome.flips] == [
        ("key:stranger", "loadTable", ("nobody-loads-orders",))
    ]
    assert (outcome.tally.deny_to_allow, outcome.tally.allow_to_deny, outcome.tally.unchanged) == (1, 0, 1)


def test_an_unchanged_set_flips_nothing(current: PolicyEngine, recorder: Recorder) -> None:
    for principal in (ANALYST, WRITER, STRANGER):
        recorder.decide(principal, "loadTable")
    assert current.active is not None
    candidate = _candidate(current)  # the same files

    outcome = redecide(current, candidate, DecisionWindow(recorder.records(), limit=10))

    assert outcome.flips == ()
    assert (outcome.tally.re_decided, outcome.tally.unchanged, outcome.tally.policies_changed) == (3, 3, 0)


def _append(path: Path, record: dict[str, Any]) -> None:
    with path.open("ab") as file:
        file.write(orjson.dumps(record) + b"\n")


def test_records_that_cannot_be_decided_exactly_are_counted_never_guessed(
    current: PolicyEngine, recorder: Recorder
) -> None:
    """Every record below is an analyst's allowed load, which the candidate would deny if it were
    decided: none may be reported as a flip."""
    candidate = _candidate(current, **{GRANTS: _without_readers(current)})
    recorder.decide(ANALYST, "loadTable")
    [complete] = recorder.records()
    # Written before records carried their Cedar request.
    _append(recorder.path, {**complete, "cedar_request": None, "request_id": "old"})
    # A value the scrubber took away: a secret-named attribute of the principal.
    recorder.decide(
        _principal("analyst", "bi", session_token="s3cr3t-value"), "loadTable", request_id="scrubbed"
    )
    # Too large to record: a namespace with many properties.
    notes = {f"note-{n}": "x" * 1000 for n in range(MAX_REQUEST_BYTES // 1000)}
    big = table_resource("default", ["sales"], "orders", [{**SALES, **notes}])
    recorder.decide(ANALYST, "loadTable", big, request_id="large")
    broken = {**complete["cedar_request"], "principal": 5}
    _append(recorder.path, {**complete, "cedar_request": broken, "request_id": "malformed"})

    records = recorder.records()
    by_id = {r["request_id"]: r for r in records}
    assert "s3cr3t-value" not in orjson.dumps(by_id["scrubbed"]).decode()
    assert by_id["large"]["cedar_request"] == {
        "omitted": f"the request is larger than {MAX_REQUEST_BYTES} bytes"
    }
    outcome = redecide(current, candidate, DecisionWindow(records, limit=10))

    assert [flip.request_id for flip in outcome.flips] == ["key:analyst-loadTable"]
    assert outcome.tally.not_re_decidable == {NOT_RECORDED: 1, SCRUBBED: 1, OMITTED: 1, MALFORMED: 1}
    assert (outcome.tally.examined, outcome.tally.re_decided) == (5, 1)


def test_the_key_id_that_proved_a_principal_is_recorded_and_decided_on(
    current: PolicyEngine, recorder: Recorder
) -> None:
    """Control for the scrubber: `api_key_id` is the gateway's own public name, kept as is, so a
    policy on it is decided again exactly."""
    other = _principal("other", "bi")
    recorder.decide(ANALYST, "loadTable")
    recorder.decide(other, "loadTable")
    key_id = ANALYST.attributes["api_key_id"]
    forbid = (
        '@id("retired-key")\nforbid (principal, action, resource)\n'
        f'when {{ principal.hasTag("api_key_id") && principal.getTag("api_key_id") == "{key_id}" }};\n'
    )
    records = recorder.records()
    tags = records[-1]["cedar_request"]["entities"][0][0]["tags"]
    assert tags == {"api_key_id": key_id}

    outcome = redecide(current, _candidate(current, **{"retired.cedar": forbid}), DecisionWindow(records, 10))

    assert [(f.principal, f.candidate.policy_ids) for f in outcome.flips] == [
        ("key:analyst", ("retired-key",))
    ]


def test_only_the_newest_decisions_count_towards_the_limit(current: PolicyEngine, recorder: Recorder) -> None:
    candidate = _candidate(current, **{GRANTS: _without_readers(current)})
    recorder.decide(ANALYST, "loadTable", request_id="oldest")
    recorder.decide(ANALYST, "loadTable", request_id="middle")
    for n in range(3):  # not decisions: skipped, not counted
        recorder.audit.record(
            AuditEvent(
                EventKind.MUTATION,
                request_id=f"m{n}",
                principal=ANALYST,
                action="updateTable",
                resource=str(ORDERS.uid),
                outcome=Outcome.SUCCESS,
            )
        )
    recorder.decide(ANALYST, "loadTable", request_id="newest")

    outcome = redecide(current, candidate, DecisionWindow(recorder.records(), limit=2))

    assert [flip.request_id for flip in outcome.flips] == ["newest", "middle"]
    assert outcome.tally.examined == 2
    assert outcome.complete


def test_the_time_bound_stops_the_work_and_says_so(current: PolicyEngine, recorder: Recorder) -> None:
    for n in range(4):
        recorder.decide(ANALYST, "loadTable", request_id=f"r{n}")
    ticks = iter(range(100))

    outcome = redecide(
        current,
        _candidate(current, **{GRANTS: _without_readers(current)}),
        DecisionWindow(recorder.records(), limit=10, deadline=1.5, clock=lambda: next(ticks)),
    )

    assert not outcome.complete
    assert outcome.stopped == DEADLINE
    assert [flip.request_id for flip in outcome.flips] == ["r3", "r2"]


def test_a_candidate_is_the_active_set_with_files_replaced_added_or_removed() -> None:
    active = {"schema.cedarschema": "s", "a.cedar": "a", "b.cedar": "b"}
    assert candidate_sources(active, {"a.cedar": "A", "c.cedar": "c"}, ["b.cedar"]) == {
        "schema.cedarschema": "s",
        "a.cedar": "A",
        "c.cedar": "c",
    }
    refused = [
        ({"../escape.cedar": "x"}, []),
        ({"tests/ALLOW/x.cedar": "x"}, []),
        ({".hidden.cedar": "x"}, []),
        ({"notes.txt": "x"}, []),
        ({}, ["schema.cedarschema"]),
        ({}, ["missing.cedar"]),
        ({"a.cedar": "x"}, ["a.cedar"]),
    ]
    for files, removed in refused:
        with pytest.raises(ResourceError):
            candidate_sources(active, files, removed)


def test_a_broken_candidate_answers_its_problems_and_decides_nothing(
    current: PolicyEngine, recorder: Recorder
) -> None:
    recorder.decide(ANALYST, "loadTable")
    assert current.active is not None
    broken = '@id("broken")\npermit (principal, action, resource)\nwhen { nonsense };\n'
    sources = candidate_sources(current.active.sources, {"broken.cedar": broken}, [])
    before = current.version

    result = preview(current, sources, [], DecisionWindow(recorder.records(), limit=10))

    assert not result.valid
    assert result.fixtures is None
    assert result.redecision is None
    assert result.files.added == ("broken.cedar",)
    assert [str(problem).split(":")[:2] for problem in result.problems] == [["broken.cedar", "3"]]
    assert current.version == before  # the active set is untouched


def test_fixtures_run_under_the_candidate_and_supplied_ones_replace_the_directory_s(
    current: PolicyEngine, tmp_path: Path
) -> None:
    directory = tmp_path / "policies"
    shutil.copytree(BUNDLED_POLICY_DIR, directory)
    engine = PolicyEngine(directory)
    engine.load()
    assert engine.active is not None
    sources = candidate_sources(engine.active.sources, {GRANTS: _without_readers(engine)}, [])
    admin_fixture = orjson.loads((directory / "tests/ALLOW/admin-creates-api-key.json").read_bytes())
    supplied = [
        # Replaces the directory's fixture of this path, which the candidate fails.
        SuppliedFixture("ALLOW", "reader-loads-granted-table.json", admin_fixture),
        SuppliedFixture("DENY", "new-and-malformed.json", {"principal": "not a uid"}),
    ]

    result = preview(engine, sources, supplied, DecisionWindow((), limit=0))

    assert result.fixtures is not None
    by_path = {r.path: r for r in result.fixtures}
    assert len(by_path) == len(list(directory.glob("tests/*/*.json"))) + 1
    assert by_path["tests/ALLOW/reader-loads-granted-table.json"].passed
    failed = {r.path: r.message for r in result.fixtures if not r.passed}
    assert failed.keys() == {
        "tests/ALLOW/reader-lists-granted-namespace.json",
        "tests/ALLOW/partner-analysts-read-a-scoped-grant.json",
        "tests/DENY/new-and-malformed.json",
    }
    assert failed["tests/ALLOW/reader-lists-granted-namespace.json"].startswith("expected ALLOW, got DENY")
    assert failed["tests/DENY/new-and-malformed.json"].startswith("bad fixture: missing keys")
    assert result.redecision is not None
    assert result.redecision.tally.examined == 0


def test_a_delegation_decision_is_decided_again_from_its_record(
    current: PolicyEngine, tmp_path: Path
) -> None:
    """`actAs` (an engine acting for a user) is recorded with the actor's and the user's entities
    and its own context: a candidate that lets the engine act for the user flips it."""
    audit = AuditLog.open(AuditSettings(destination=str(tmp_path / "audit.jsonl")))
    try:
        judge = CedarDelegationJudge(current, audit)
        engine = _principal("trino", "engines")
        user = Principal("user:dana", PrincipalKind.USER, frozenset({"bi"}), AuthMethod.GATEWAY_TOKEN)
        facts = DelegationFacts(JWT_TOKEN_TYPE, UNSIGNED_ISSUER, source="trino-cli")
        assert not judge.decide(engine, user, facts, "10.0.0.7", refresh=False)
        assert audit.flush()
        records = list(records_from_end(tmp_path / "audit.jsonl", 1024**2))
    finally:
        audit.close()
    [record] = records
    assert record["cedar_request"]["context"]["source"] == "trino-cli"
    trusted = (
        '@id("trino-acts-for-bi")\npermit (principal == Cedarberg::Service::"key:trino", '
        'action == Cedarberg::Action::"actAs", resource in Cedarberg::Group::"bi")\n'
        'when { context has source && context.source == "trino-cli" };\n'
    )

    outcome = redecide(current, _candidate(current, **{"trino.cedar": trusted}), DecisionWindow(records, 1))

    assert [(f.principal, f.action, f.resource, f.candidate.policy_ids) for f in outcome.flips] == [
        ("key:trino", "actAs", 'Cedarberg::User::"user:dana"', ("trino-acts-for-bi",))
    ]


def _secretive_entities(name: str) -> str:
    """An entity array whose entities hold secrets at every depth the record keeps."""
    nested: Any = {"token": "t0p", "note": "Bearer abcdefgh"}
    for depth in range(9):  # past the record's depth limit
        nested = {"level": depth, "inner": [nested, f"cbk_k{depth}_secret"]}
    entities = [
        {"uid": {"type": "Cedarberg::Namespace", "id": name}, "attrs": {"deep": nested}, "parents": []},
        {"uid": {"type": "Cedarberg::Warehouse", "id": "w"}, "attrs": {"password": "x", "ok": "fine"}},
    ]
    return orjson.dumps(entities).decode()


@pytest.mark.parametrize("name", ["first", "second"])
def test_entities_scrubbed_one_by_one_read_as_the_whole_array_scrubbed(name: str) -> None:
    """The record scrubs resource entities one by one (a resource's ancestors are its siblings'),
    the second time with the shared ancestor cached: the same text as scrubbing the array whole."""
    text = _secretive_entities(name)
    whole = orjson.dumps(decision_record._clean(orjson.loads(text)))
    one_by_one = decision_record._scrubbed_entities(text)
    assert one_by_one == whole
    assert b"t0p" not in one_by_one
    assert b"secret" not in one_by_one
    assert b"abcdefgh" not in one_by_one
    assert b'"fine"' in one_by_one
    assert b"[nested too deep]" in one_by_one


_JSON_TEXT = st.one_of(
    st.text(max_size=10),
    st.sampled_from(
        ["Bearer abcdefgh", "password=x", "cbk_k1_s", 'a"b\\c', "\u017fecret=1", "[x]{", "api_key_id"]
    ),
)
_JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**53), 2**53) | _JSON_TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_JSON_TEXT, inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=500, deadline=None)
@given(_JSON_VALUES, st.integers(0, 9))
def test_a_text_kept_as_it_is_reads_as_the_scrubbed_value(value: Any, depth: int) -> None:
    """The record keeps a text that needs no scrubbing as it is (`_left_as_is`): whatever the
    text holds (secrets, escapes, brackets in strings, nesting past the depth kept), what it
    keeps reads as the value scrubbed string by string."""
    text = orjson.dumps(value)
    assert orjson.loads(decision_record._scrubbed_json(text, depth)) == decision_record._clean(value, depth)


def test_a_new_resource_entity_is_kept_as_it_is_and_a_secret_one_is_not() -> None:
    plain = orjson.dumps({"uid": {"type": "Cedarberg::Namespace", "id": "w/ns"}, "attrs": {"readers": []}})
    assert decision_record._left_as_is(plain.decode(), 1)
    for secretive in (
        {"uid": {"type": "Cedarberg::Namespace", "id": "w/ns"}, "attrs": {"note": "Bearer abcdefgh"}},
        {"uid": {"type": "Cedarberg::Namespace", "id": "w/ns"}, "attrs": {"note": 'a"password=x'}},
        {"uid": {"type": "Cedarberg::Namespace", "id": "w/ns"}, "attrs": {"db_password": "x"}},
    ):
        text = orjson.dumps(secretive)
        assert not decision_record._left_as_is(text.decode(), 1)
        assert b"password=x" not in decision_record._scrubbed_json(text, 1)
        assert b"abcdefgh" not in decision_record._scrubbed_json(text, 1)


def test_an_escape_cannot_hide_a_secret_or_a_depth_from_the_check() -> None:
    # A secret spelled with a JSON escape is not in the text as written.
    escaped = '{"note": "\\u0070assword=hunter2"}'
    assert orjson.loads(escaped) == {"note": "password=hunter2"}
    assert b"hunter2" not in decision_record._scrubbed_json(escaped, 0)
    # An escaped backslash ends a string where a naive reading does not: the brackets of the next
    # string would read as closing ones, and nesting past the depth kept would pass for shallow.
    deep: Any = "x"
    for _ in range(9):
        deep = [deep]
    value = ["a\\", "]]]]]]]]]]", deep]
    kept = decision_record._scrubbed_json(orjson.dumps(value), 0)
    assert orjson.loads(kept) == decision_record._clean(value)
