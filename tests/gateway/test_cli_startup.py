"""The light `cedarberg` commands start without the heavy libraries (issue 29, part 7).

`cedarberg --help`, `keys list` and `policies validate` must start in a fraction of a second; what
decides that is which modules they import. Each command runs in a real child process through
`cedarberg.gateway.cli.main` (what `cedarberg` and `python -m cedarberg.gateway.cli` run), and the
test reads the names in `sys.modules` after it finished: a behaviour test, not a timing one (the
timings are `make bench`'s, bench/startup.py). The control: the same probe sees the libraries
when a command that needs them (`dropped list`, which opens the catalog) runs, so an empty
finding is not a broken probe.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from cedarberg.gateway.config.authz import BUNDLED_POLICY_DIR
from tests.support.gateway import bundled_policies
from tests.support.policies import validate_summary

REPO_ROOT = Path(__file__).resolve().parents[2]

# Runs `cedarberg ARGV...` in this process, then writes the top-level names of every imported
# module (and the exit code) to the file named by the first argument.
_PROBE = """
import json, sys
from cedarberg.gateway.cli.main import main
report, argv = sys.argv[1], sys.argv[2:]
try:
    code = main(argv)
except SystemExit as exit_:
    code = exit_.code
names = sorted({name.partition(".")[0] for name in sys.modules} | set(sys.modules))
with open(report, "w") as f:
    json.dump({"code": code, "modules": names}, f)
"""

# Nothing a light command does needs these: data frames, the HTTP server, cloud SDKs, metrics.
NEVER = frozenset(
    {
        "pyarrow",
        "pandas",
        "numpy",
        "aiohttp",
        "uvloop",
        "boto3",
        "botocore",
        "fsspec",
        "s3fs",
        "google",
        "azure",
        "prometheus_client",
        "jwt",
        "cedarberg.catalog.context",
        "cedarberg.gateway.web",
        "cedarberg.gateway.serve.server",
    }
)
# The parser alone (`--help`): no settings, no policy engine, no database.
PARSER_ONLY = NEVER | {"pydantic", "sqlalchemy", "alembic", "cedarpy", "pyiceberg", "limits", "argon2"}
# `policies validate` of a set without @row_filter (the bundled one) needs the settings (pydantic)
# and cedarpy: no store, and nothing of pyiceberg (neither the operation table's nor the request
# context's types, nor the row-filter parser and its pyparsing grammar).
VALIDATE = NEVER | {
    "sqlalchemy",
    "alembic",
    "aiosqlite",
    "asyncpg",
    "argon2",
    "pyiceberg",
    "pyparsing",
    "cedarberg.catalog.requests",
    "cedarberg.catalog.effects",
    "cedarberg.catalog.planning.request",
}
ROW_FILTER_PARSER = "pyiceberg.expressions.parser"
# `keys list` on an existing SQLite store reads it with sqlite3 (`authn.key_listing`): no
# SQLAlchemy, Alembic or event loop, and never a policy, a table or a warehouse.
KEYS_LIST = NEVER | {
    "cedarpy",
    "pyiceberg",
    "pyparsing",
    "sqlalchemy",
    "alembic",
    "aiosqlite",
    "asyncio",
    "argon2",
}


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CEDARBERG_")}
    env["PYTHONPATH"] = os.pathsep.join(
        [str(REPO_ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])]
    )
    return env


def _imported_by(tmp_path: Path, *argv: str) -> tuple[int, set[str], str]:
    """Run `cedarberg ARGV` in a child process: its exit code, every module it imported, and its
    standard output."""
    report = tmp_path / "modules.json"
    done = subprocess.run(
        [sys.executable, "-c", _PROBE, str(report), *argv],
        capture_output=True,
        text=True,
        env=_clean_env(),
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    assert report.exists(), done.stderr
    result = json.loads(report.read_text())
    return int(result["code"]), set(result["modules"]), done.stdout


def _key_store(tmp_path: Path) -> Path:
    data_dir = tmp_path / "data"
    created = subprocess.run(
        [sys.executable, "-m", "cedarberg.gateway.cli", "keys", "create", "--person", "alice",
         "--group", "admins", "--data-dir", str(data_dir)],
        capture_output=True,
        text=True,
        env=_clean_env(),
        cwd=tmp_path,
        timeout=120,
        check=False,
    )  # fmt: skip
    assert created.returncode == 0, created.stderr
    return data_dir


def test_help_imports_only_the_parsers(tmp_path: Path) -> None:
    code, modules, _ = _imported_by(tmp_path, "--help")
    assert code == 0
    assert "argparse" in modules
    assert sorted(modules & PARSER_ONLY) == []


@pytest.mark.parametrize("command", ["keys", "policies", "dropped", "db", "kms"])
def test_sub_command_help_imports_only_the_parsers(tmp_path: Path, command: str) -> None:
    code, modules, _ = _imported_by(tmp_path, command, "--help")
    assert code == 0
    assert sorted(modules & PARSER_ONLY) == []


def test_keys_list_reads_an_existing_store_with_sqlite3_only(tmp_path: Path) -> None:
    data_dir = _key_store(tmp_path)
    code, modules, out = _imported_by(tmp_path, "keys", "list", "--data-dir", str(data_dir))
    assert code == 0
    assert "alice" in out  # it did list the key
    assert {"sqlite3", "pydantic"} <= modules  # with the settings, from the store
    assert sorted(modules & KEYS_LIST) == []


def test_keys_list_of_a_store_not_yet_created_goes_through_the_key_store(tmp_path: Path) -> None:
    """Control: a store that does not exist is created and migrated by the key store, as before
    (SQLAlchemy and Alembic), and lists nothing."""
    data_dir = tmp_path / "fresh"
    code, modules, out = _imported_by(tmp_path, "keys", "list", "--data-dir", str(data_dir))
    assert code == 0
    assert out.splitlines()[0].startswith("ID ")
    assert len(out.splitlines()) == 1
    assert {"sqlalchemy", "alembic"} <= modules
    assert (data_dir / "catalog.db").is_file()


def test_policies_validate_imports_the_engine_only(tmp_path: Path) -> None:
    code, modules, out = _imported_by(tmp_path, "policies", "validate", str(REPO_ROOT / "policies"))
    assert code == 0
    assert validate_summary(BUNDLED_POLICY_DIR) in out  # it did load the bundled set
    assert {"cedarpy", "pydantic", "cedarberg.gateway.authz.contract"} <= modules  # with Cedar
    assert sorted(modules & VALIDATE) == []


def test_the_bundled_policies_carry_no_row_filter() -> None:
    """What the test above measures is the common case: the bundled set restricts no rows."""
    from cedarberg.gateway.authz.engine import PolicyEngine

    engine = PolicyEngine(REPO_ROOT / "policies", entity_cache_size=0)
    engine.load()
    assert engine.active is not None
    assert all(rule.row_filter is None for rule in engine.active.restrictions.values())


def test_validating_a_row_filter_imports_its_parser(tmp_path: Path) -> None:
    """Control: a permit carrying a @row_filter is parsed by pyiceberg's parser (the only judge of
    a row filter), and a typo in it is still a refused set."""
    permit = (
        '@id("analysts-eu")\n@row_filter("region = {value}")\n'
        'permit (principal in Cedarberg::Group::"analysts",\n'
        '        action in [Cedarberg::Action::"loadTable", Cedarberg::Action::"planTableScan"],\n'
        "        resource);\n"
    )
    good = bundled_policies(tmp_path / "good", {"restricted.cedar": permit.format(value="'eu'")})
    code, modules, _ = _imported_by(tmp_path, "policies", "validate", str(good))
    assert code == 0
    assert ROW_FILTER_PARSER in modules
    bad = bundled_policies(tmp_path / "bad", {"restricted.cedar": permit.format(value="")})
    code, modules, _ = _imported_by(tmp_path, "policies", "validate", str(bad))
    assert code == 1
    assert ROW_FILTER_PARSER in modules


def test_the_server_imports_what_requests_need_at_start_up(tmp_path: Path) -> None:
    """The laziness is the commands': importing the server (as `serve` does before it listens)
    brings the body table with the catalog's request models, the effects and the row-filter
    parser, so no request and no policy reload imports them."""
    report = tmp_path / "modules.json"
    probe = (
        "import json, sys\n"
        "import cedarberg.gateway.serve.server\n"
        "json.dump(sorted(sys.modules), open(sys.argv[1], 'w'))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe, str(report)],
        capture_output=True,
        text=True,
        env=_clean_env(),
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    modules = set(json.loads(report.read_text()))
    assert {
        "cedarberg.gateway.web.bodies",
        "cedarberg.catalog.requests",
        "cedarberg.catalog.effects",
        ROW_FILTER_PARSER,
    } <= modules


def test_a_catalog_command_still_imports_what_it_needs(tmp_path: Path) -> None:
    """Control: `dropped list` opens the catalog, and the probe sees pyiceberg and pyarrow."""
    data_dir = _key_store(tmp_path)
    code, modules, _ = _imported_by(tmp_path, "dropped", "list", "--data-dir", str(data_dir))
    assert code == 0
    assert {"pyiceberg", "pyarrow", "sqlalchemy", "cedarberg.catalog.context"} <= modules
