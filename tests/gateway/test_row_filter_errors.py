"""A `@row_filter` typo is reported as "expected X at column N" with its file:line, never as the
parser's grammar dump (`gateway.authz.row_filter_syntax`).

The real `cedarberg policies validate` runs on a copy of the bundled policies with one restricted
permit added; the checker's columns are checked against typos of every kind, and it is checked
to agree with pyiceberg on filters pyiceberg accepts (it only explains pyiceberg's refusals).
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from pyiceberg.expressions.parser import parse

from cedarberg.gateway.authz.restrictions import parse_restriction
from cedarberg.gateway.authz.row_filter_syntax import MAX_MESSAGE_CHARS, syntax_problem
from tests.support.cli import run_cedarberg
from tests.support.gateway import bundled_policies

_GRAMMAR_DUMP = ("Expected {", "W:(", "Group:(", "string enclosed in")


def _permit(row_filter: str) -> str:
    return (
        '\n@id("analysts-eu")\n'
        f'@row_filter("{row_filter}")\n'
        'permit (principal in Cedarberg::Group::"analysts",\n'
        '        action in [Cedarberg::Action::"loadTable", Cedarberg::Action::"planTableScan"],\n'
        "        resource);\n"
    )


def _validate(directory: Path) -> subprocess.CompletedProcess[str]:
    return run_cedarberg("policies", "validate", str(directory))


def test_policies_validate_names_the_file_line_and_column_of_a_row_filter_typo(tmp_path: Path) -> None:
    directory = bundled_policies(tmp_path / "policies", {"restricted.cedar": _permit("region = 'eu' AND")})
    done = _validate(directory)
    assert done.returncode == 1
    output = done.stdout + done.stderr
    expected = (
        "restricted.cedar:2: @row_filter is not a valid Iceberg row filter: expected an expression "
        "(a column compared with a value, or a ( ) after AND at column 18"
    )
    assert expected in output, output
    assert not any(dump in output for dump in _GRAMMAR_DUMP), output


def test_policies_validate_accepts_the_corrected_filter(tmp_path: Path) -> None:
    """Control: the same permit with the filter finished is a valid set."""
    directory = bundled_policies(
        tmp_path / "policies", {"restricted.cedar": _permit("region = 'eu' AND amount < 100")}
    )
    done = _validate(directory)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("region = ", "expected a value (a 'string', a number, true or false) after = at column 10"),
        ("region = = 'eu'", "after = at column 10, found '='"),
        ("x > 1 OR", "after OR at column 9"),
        ("a = 1 AND AND b = 2", "after AND at column 11, found 'AND'"),
        ("a = 1 b = 2", "expected AND, OR or the end of the filter at column 7, found 'b'"),
        ("(a = 1", "expected ) at column 7 to close the ( at column 1"),
        ("a = 1)", "unexpected ) at column 6: no ( to close"),
        ("a = 'eu", "the string opened at column 5 is not closed (expected ')"),
        ('"a b = 1', "the quoted name opened at column 1 is not closed"),
        ("a is nul", "expected NULL or NAN after IS at column 6, found 'nul'"),
        ("a not between 1 and 2", "expected IN or LIKE after NOT at column 7, found 'between'"),
        ("a between 1", "expected AND and the upper bound after 1 at column 12"),
        ("a in 1", "expected ( and a list of values after IN at column 6, found '1'"),
        ("a in ('x', 1)", "the IN list mixes integers and strings at column 12"),
        ("a in (1 2)", "expected , or ) in the IN list at column 9, found '2'"),
        ("a like x", "expected a 'string' pattern after LIKE at column 8, found 'x'"),
        (
            "region",
            "expected a comparison (=, !=, <, <=, >, >=, IN, NOT IN, IS NULL, IS NOT NULL, LIKE, "
            "BETWEEN) after region at column 7",
        ),
        ("a # 1", "unexpected character '#' at column 3"),
        ("'eu' region", "expected a comparison operator (=, !=, <, <=, >, >=) after 'eu' at column 6"),
        ("NOT", "after NOT at column 4"),
        ("a = 1.5e3", "expected AND, OR or the end of the filter at column 8, found 'e3'"),
    ],
)
def test_each_typo_is_told_what_was_expected_and_where(text: str, expected: str) -> None:
    with pytest.raises(Exception):  # noqa: B017 - pyparsing's or pyiceberg's own refusal
        parse(text)
    problem = syntax_problem(text)
    assert problem is not None
    assert expected in problem


def test_a_long_filter_gets_a_bounded_message() -> None:
    text = "a = 1 AND " * 1500 + "b ="
    problem = syntax_problem(text)
    assert problem is not None
    assert len(problem) <= MAX_MESSAGE_CHARS
    assert problem.endswith(f"at column {len(text) + 1}")


@pytest.mark.parametrize(
    "text",
    [
        "region = 'eu'",
        "'eu' = region",
        'a.b.c >= -1.5 and "x y" <> 2',
        "not (c is not null or d in (1, 2)) and e between 1 and 2",
        "f not like 'x%' and g like 'it''s' and h is nan and i is not nan",
        "j not in ('a', 'b') or k in (true, false) or l = true",
        "true",
        "(((a = 1)))",
    ],
)
def test_the_checker_agrees_with_pyiceberg_on_valid_filters(text: str) -> None:
    parse(text)
    assert syntax_problem(text) is None


def test_a_refused_value_keeps_pyicebergs_plain_message() -> None:
    """A well-shaped filter refused for its value (a % inside a LIKE pattern) keeps pyiceberg's
    own sentence, still without a grammar dump."""
    policy = {
        "effect": "permit",
        "action": {"op": "All"},
        "annotations": {"row_filter": "a LIKE 'x%y'"},
    }
    with pytest.raises(ValueError, match="only supports wildcard, '%', at the end of a string") as refused:
        parse_restriction("p", policy)
    assert not any(dump in str(refused.value) for dump in _GRAMMAR_DUMP)
