"""Read a policy directory, parse and validate it, and compile it into pre-parsed Cedar handles.

A policy directory holds `schema.cedarschema` and any number of `*.cedar` files (read in name order;
sub-directories such as `tests/` are not policies). Every policy gets a stable id: its
`@id("...")` annotation, else `FILE:LINE` of its first line. Ids must be unique across the set.

Cedar reports parse and validation errors without positions, so this module splits each file into
statements itself (honouring strings and `//` comments), parses and validates each statement on its
own, and locates the error line: for grammar errors by re-parsing growing line prefixes (the first
prefix whose error is not "unexpected end of input" ends on the bad line), otherwise by finding the
identifier the message quotes. Every problem is reported, not just the first.

Raises `PolicyLoadError`; never returns a partial set.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

import cedarpy
import orjson

from cedarberg.gateway.authz.errors import PolicyLoadError, PolicyProblem
from cedarberg.gateway.authz.restrictions import ScanRule, parse_restriction
from cedarberg.gateway.authz.sight import PolicySight

SCHEMA_FILE = "schema.cedarschema"
POLICY_SUFFIX = ".cedar"
MAX_FILE_BYTES = 1024 * 1024  # a policy file larger than this is a mistake, not a policy

_EOF_MESSAGE = "unexpected end of input"


@dataclass(frozen=True, slots=True)
class Statement:
    text: str
    first_line: int  # line of `text`'s first character
    line: int  # line of the first code character (annotation or effect)


@dataclass(frozen=True, slots=True)
class CompiledPolicySet:
    """A policy set that parsed and validated: the handles decisions use, and what it came from."""

    version: str  # sha256 (hex) of the file names and contents
    directory: Path
    schema: cedarpy.Schema
    policies: cedarpy.PolicySet
    sources: Mapping[str, str]  # file name -> text (schema and policies)
    locations: Mapping[str, str]  # policy id -> "FILE:LINE"
    restrictions: Mapping[str, ScanRule]  # policy id -> its @columns/@row_filter (restrictions.py)
    # The restricted permits as Cedar JSON: their scopes say whom and what they restrict (binding.py).
    restricted_policies: Mapping[str, Mapping[str, Any]]
    sight: PolicySight  # what the policies read of a resource: the decision cache's key (sight.py)
    effects: Mapping[str, str]  # policy id -> "permit" or "forbid"


def split_statements(text: str) -> list[Statement]:
    """Split Cedar policy text at top-level `;` (outside strings and comments)."""
    statements: list[Statement] = []
    start, first_line, line = 0, 1, 1
    code_line: int | None = None
    i, n = 0, len(text)
    while i < n:
        ch = text[i]
        if ch == "\n":
            line += 1
        elif ch == "/" and text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
            continue
        elif ch == '"':
            code_line = code_line or line
            i += 1
            while i < n and text[i] != '"':
                if text[i] == "\\":
                    i += 1
                elif text[i] == "\n":
                    line += 1
                i += 1
        elif ch == ";":
            statements.append(Statement(text[start : i + 1], first_line, code_line or line))
            start, first_line, code_line = i + 1, line, None
        elif not ch.isspace():
            code_line = code_line or line
        i += 1
    if code_line is not None:  # trailing text without `;`: let the parser say what is wrong
        statements.append(Statement(text[start:], first_line, code_line))
    return statements


def _find_token_line(text: str, first_line: int, message: str) -> int | None:
    """The first line of `text` that holds an identifier the error message quotes."""
    tokens = re.findall(r"`([^`]+)`", message)
    tail = re.search(r":\s*([A-Za-z_][\w:]*)\s*$", message)
    if tail:
        tokens.append(tail.group(1))
    for token in tokens:
        if re.fullmatch(r"policy\d+", token):
            continue
        for candidate in dict.fromkeys((token, token.rsplit("::", 1)[-1])):
            pattern = re.compile(r"(?<![\w:])" + re.escape(candidate) + r"(?![\w])")
            for offset, raw in enumerate(text.split("\n")):
                code = raw.split("//", 1)[0] if '"' not in raw else raw
                if pattern.search(code):
                    return first_line + offset
    return None


def _locate(text: str, first_line: int, fallback: int, message: str, parse: Callable[[str], Any]) -> int:
    if "unexpected token" in message or "invalid token" in message:
        lines = text.split("\n")
        for k in range(1, len(lines) + 1):
            try:
                parse("\n".join(lines[:k]))
            except ValueError as err:
                if _EOF_MESSAGE not in str(err):
                    return first_line + k - 1
            else:  # a prefix that parses cannot hold the error
                continue
    return _find_token_line(text, first_line, message) or fallback


def _clean(message: str) -> str:
    message = re.sub(r"^for policy `policy\d+`, ", "", message)
    return message.removeprefix("Policy parse error: ")


def _compile_schema(text: str, problems: list[PolicyProblem]) -> cedarpy.Schema | None:
    try:
        return cedarpy.Schema.from_str(text)
    except ValueError as err:
        message = str(err)
        line = _locate(text, 1, 1, message, cedarpy.Schema.from_str)
        problems.append(PolicyProblem(SCHEMA_FILE, line, message))
        return None


def _compile_statement(
    name: str, stmt: Statement, schema: cedarpy.Schema | None, problems: list[PolicyProblem]
) -> tuple[str, dict[str, Any]] | None:
    """Parse (and validate) one statement; return its id and JSON (EST) form, or record problems."""
    try:
        est = orjson.loads(cedarpy.policies_to_json_str(stmt.text))
    except ValueError as err:
        message = _clean(str(err))
        line = _locate(stmt.text, stmt.first_line, stmt.line, message, cedarpy.PolicySet.from_str)
        problems.append(PolicyProblem(name, line, message))
        return None
    if est.get("templates"):
        problems.append(
            PolicyProblem(name, stmt.line, "templates (?principal / ?resource slots) are not supported")
        )
        return None
    policies = list(est.get("staticPolicies", {}).values())
    if len(policies) != 1:  # cannot happen for one `;`-terminated statement; refuse rather than guess
        problems.append(PolicyProblem(name, stmt.line, "expected exactly one policy in this statement"))
        return None
    policy: dict[str, Any] = policies[0]
    if schema is not None:
        result = cedarpy.validate_policies(stmt.text, schema)
        seen: set[tuple[int, str]] = set()
        for error in result.errors:
            message = _clean(error.error)
            line = _find_token_line(stmt.text, stmt.first_line, message) or stmt.line
            if (line, message) not in seen:
                seen.add((line, message))
                problems.append(PolicyProblem(name, line, message))
    annotated = policy.get("annotations", {}).get("id")
    policy_id = annotated if isinstance(annotated, str) and annotated else f"{name}:{stmt.line}"
    return policy_id, policy


def _read_sources(directory: Path) -> dict[str, str]:
    if not directory.is_dir():
        raise PolicyLoadError([PolicyProblem(str(directory), 0, "not a directory")])
    sources: dict[str, str] = {}
    problems: list[PolicyProblem] = []
    names = [SCHEMA_FILE, *sorted(p.name for p in directory.glob("*" + POLICY_SUFFIX) if p.is_file())]
    for name in names:
        path = directory / name
        try:
            if path.stat().st_size > MAX_FILE_BYTES:
                problems.append(PolicyProblem(name, 0, f"larger than {MAX_FILE_BYTES} bytes"))
                continue
            sources[name] = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            problems.append(PolicyProblem(name, 0, "missing"))
        except (OSError, UnicodeDecodeError) as err:
            problems.append(PolicyProblem(name, 0, f"cannot be read: {err}"))
    if problems:
        raise PolicyLoadError(problems)
    return sources


def content_version(sources: Mapping[str, str]) -> str:
    """The version of a policy set: sha256 over its file names and contents, in name order."""
    digest = hashlib.sha256()
    for name in sorted(sources):
        digest.update(name.encode() + b"\0" + sources[name].encode() + b"\0")
    return digest.hexdigest()


def read_directory(directory: Path) -> tuple[str, dict[str, str]]:
    """Read the files of a policy directory; returns (version, sources). Raises `PolicyLoadError`."""
    sources = _read_sources(directory)
    return content_version(sources), sources


def compile_sources(directory: Path, version: str, sources: Mapping[str, str]) -> CompiledPolicySet:
    """Parse and validate every file; raises `PolicyLoadError` with all the problems found."""
    problems: list[PolicyProblem] = []
    schema = _compile_schema(sources[SCHEMA_FILE], problems)
    static: dict[str, dict[str, Any]] = {}
    locations: dict[str, str] = {}
    restrictions: dict[str, ScanRule] = {}
    for name in sorted(n for n in sources if n != SCHEMA_FILE):
        for stmt in split_statements(sources[name]):
            compiled = _compile_statement(name, stmt, schema, problems)
            if compiled is None:
                continue
            policy_id, policy = compiled
            if policy_id in static:
                problems.append(
                    PolicyProblem(
                        name,
                        stmt.line,
                        f"duplicate policy id {policy_id!r} (first at {locations[policy_id]})",
                    )
                )
                continue
            static[policy_id] = policy
            locations[policy_id] = f"{name}:{stmt.line}"
            try:
                rule = parse_restriction(policy_id, policy)
            except ValueError as err:
                problems.append(PolicyProblem(name, stmt.line, str(err)))
                continue
            if rule is not None:
                restrictions[policy_id] = rule
    if problems or schema is None:
        raise PolicyLoadError(problems)
    document = {"staticPolicies": static, "templates": {}, "templateLinks": []}
    try:
        policies = cedarpy.PolicySet.from_json_str(orjson.dumps(document).decode())
    except ValueError as err:  # pragma: no cover - every statement parsed on its own above
        raise PolicyLoadError([PolicyProblem(str(directory), 0, str(err))]) from err
    return CompiledPolicySet(
        version=version,
        directory=directory,
        schema=schema,
        policies=policies,
        sources=MappingProxyType(dict(sources)),
        locations=MappingProxyType(locations),
        restrictions=MappingProxyType(restrictions),
        restricted_policies=MappingProxyType({policy_id: static[policy_id] for policy_id in restrictions}),
        sight=PolicySight.of(static.values()),
        effects=MappingProxyType(
            {policy_id: str(policy.get("effect", "")) for policy_id, policy in static.items()}
        ),
    )
