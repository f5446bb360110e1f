"""The fields a log call attaches (`extra={...}`) reach the log in both formats, scrubbed and
bounded (issue 29 §3: a refused policy set once logged only its message, both formatters dropping
the problems the loader attached).

Each test writes through the process log's handler (`gateway.logs.log_handler`: the scrubbing and
bounding filters, then the formatter), as a server does.
"""

from __future__ import annotations

import contextvars
import io
import logging
from pathlib import Path
from typing import Any, Literal

import orjson
import pytest

from cedarberg.gateway.log_fields import MAX_FIELD_CHARS, MAX_FIELD_ITEMS, MAX_FIELDS_CHARS
from cedarberg.gateway.logs import MAX_MESSAGE_CHARS, bind_principal, bind_request, log_handler

PROBLEMS = ["grants.cedar:12: unexpected token `}`", "schema.cedarschema: missing"]
# An API key and a random-looking run: what a careless log call could attach.
API_KEY = "cbk_abcdefghijklmnop_Q7vX2pLk9ZtR4mWc8NbY3hJd6FsG1aEu5KoT0iVyAbC"
RANDOM_RUN = "Q7vX2pLk9ZtR4mWc8NbY3hJd6FsG1aEu5KoT0iVy"


def _write(fmt: Literal["json", "text"], message: str, **fields: Any) -> str:
    """What the process log writes for one ERROR record carrying `fields`."""
    stream = io.StringIO()
    handler = log_handler(stream, fmt)
    logger = logging.getLogger("cedarberg.test.fields")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        logger.error(message, extra=fields)
    finally:
        logger.removeHandler(handler)
        logger.propagate = True
    return stream.getvalue()


def _json(message: str, **fields: Any) -> dict[str, Any]:
    [line] = _write("json", message, **fields).splitlines()
    document: dict[str, Any] = orjson.loads(line)
    return document


# -- control: the fields are kept --------------------------------------------------------------


def test_json_lines_keep_every_attached_field_as_a_key() -> None:
    line = _json(
        "policy set refused",
        policy_dir="/etc/cedarberg/policies",
        policy_version="ab" * 32,
        problems=PROBLEMS,
        problem_count=2,
        active=True,
    )
    assert line["message"] == "policy set refused"
    assert line["problems"] == PROBLEMS
    assert line["policy_dir"] == "/etc/cedarberg/policies"
    assert line["policy_version"] == "ab" * 32  # a lowercase hash is not mistaken for a secret
    assert (line["problem_count"], line["active"]) == (2, True)
    assert line["time"].endswith("Z")
    assert "ts" not in line
    # Standard LogRecord attributes are not repeated as fields.
    assert not {"msg", "args", "levelno", "pathname", "lineno", "created", "thread"} & line.keys()


def test_text_lines_keep_every_attached_field_as_key_value_pairs() -> None:
    def in_a_request() -> str:
        bind_request("rid-fields-0001")
        bind_principal("service:key:ops")
        return _write("text", "policy set refused", policy_dir="/etc/policies", problems=PROBLEMS, count=2)

    # In a copy of the context, as aiohttp runs each request: the binding ends with it.
    [line] = contextvars.copy_context().run(in_a_request).splitlines()
    assert " ERROR cedarberg.test.fields policy set refused policy_dir=/etc/policies " in line
    assert 'problems=["grants.cedar:12: unexpected token `}`","schema.cedarschema: missing"]' in line
    assert " count=2 " in line
    assert line.endswith("[rid=rid-fields-0001 principal=service:key:ops]")
    assert "msg=" not in line
    assert "levelno=" not in line


def test_a_field_named_like_a_line_key_does_not_replace_it() -> None:
    line = _json("hello", time="then", level="custom", principal="someone")
    assert line["time"].endswith("Z")
    assert line["level"] == "ERROR"
    assert line["principal"] is None
    assert (line["extra_time"], line["extra_level"], line["extra_principal"]) == ("then", "custom", "someone")


def test_values_that_are_not_json_become_text() -> None:
    line = _json("odd values", where=Path("/srv/policies"), huge=2**70, nested={"a": {1, 2}})
    assert line["where"] == "/srv/policies"
    assert line["huge"] == str(2**70)
    assert sorted(line["nested"]["a"]) == [1, 2]


def _fail() -> None:
    raise ValueError("boom")


def test_the_text_format_keeps_the_traceback_below_the_fields() -> None:
    stream = io.StringIO()
    handler = log_handler(stream, "text")
    logger = logging.getLogger("cedarberg.test.fields.exc")
    logger.addHandler(handler)
    logger.propagate = False
    try:
        try:
            _fail()
        except ValueError:
            logger.exception("failed", extra={"step": "reload"})
    finally:
        logger.removeHandler(handler)
        logger.propagate = True
    first, *rest = stream.getvalue().splitlines()
    assert first.endswith("failed step=reload")
    assert rest[0] == "Traceback (most recent call last):"
    assert rest[-1] == "ValueError: boom"


# -- attack: a field cannot leak a secret, forge a line or fill the log ----------------------------


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_secrets_in_fields_are_scrubbed(fmt: Literal["json", "text"]) -> None:
    text = _write(
        fmt,
        "credentials seen",
        client_secret="hunter2-is-not-random",
        presented=API_KEY,
        headers={"Authorization": "Bearer abc.def.ghi", "accept": "json"},
        problems=[f"key {API_KEY} refused", f"id {RANDOM_RUN}"],
    )
    for secret in ("hunter2-is-not-random", API_KEY[4:], "abc.def.ghi", RANDOM_RUN):
        assert secret not in text
    assert text.count("[REDACTED]") >= 5
    assert "json" in text  # what is not secret stays


def test_a_text_value_cannot_forge_a_line_or_a_pair() -> None:
    text = _write("text", "lookup", table='x" principal=admin\n2026-01-01 ERROR forged line')
    [line] = text.splitlines()
    assert ' table="x\\" principal=admin\\n2026-01-01 ERROR forged line"' in line


@pytest.mark.parametrize("fmt", ["json", "text"])
def test_fields_are_bounded_whatever_they_hold(fmt: Literal["json", "text"]) -> None:
    text = _write(
        fmt,
        "a client's values",
        long="x" * 1_000_000,
        many=[f"item {i}" for i in range(10_000)],
        wide={f"k{i}": i for i in range(10_000)},
        deep=[[[[[["bottom"]]]]]],
        after="still here",
    )
    [line] = text.splitlines()
    assert len(line) <= MAX_FIELDS_CHARS + MAX_MESSAGE_CHARS + 512
    assert "characters cut]" in line
    assert "items cut]" in line
    assert "nested too deep" in line
    assert "after=" in line or '"after"' in line  # every field is still named


def test_each_cut_is_marked_and_keeps_the_head() -> None:
    line = _json("bounded", long="y" * (MAX_FIELD_CHARS + 10), many=list(range(MAX_FIELD_ITEMS + 7)))
    assert line["long"].startswith("y" * 100)
    assert line["long"].endswith("[10 characters cut]")
    assert line["many"][:MAX_FIELD_ITEMS] == list(range(MAX_FIELD_ITEMS))
    assert line["many"][-1] == "...[7 items cut]"


def test_a_list_over_the_record_budget_keeps_the_items_that_fit() -> None:
    problems = [f"grants.cedar:{n}: " + "e" * 400 for n in range(1, MAX_FIELD_ITEMS)]
    line = _json("policy set refused", problems=problems)
    kept = line["problems"]
    assert kept[0] == problems[0]
    assert kept[-1].endswith("items cut]")
    assert 1 < len(kept) < len(problems)
    assert len(orjson.dumps(kept)) <= MAX_FIELDS_CHARS
