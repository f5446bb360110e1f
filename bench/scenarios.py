"""The operations the suite measures, and which server variant runs which.

Paths are templates: ``{catalog}`` becomes ``/v1/{prefix}``, ``{config_query}`` the peer's
``?warehouse=...``; ``{t}`` (the wrk thread: each writer's own table) and ``{n}`` (a value
unique in the run) are filled by bench/lua/write.lua for every request.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from urllib.parse import urlencode

from bench import fixtures

READ = "read"
WRITE = "write"


@dataclass(frozen=True)
class Operation:
    name: str
    title: str
    kind: str  # READ: a static request (bench/lua/read.lua); WRITE: unique bodies (write.lua)
    method: str
    path: str
    connections: int
    threads: int = 1
    role: str = "writer"  # whose bearer token is sent; "" sends none (the token endpoint)
    header: str = "Authorization"  # where: `Bearer <token>`, or the raw value (bench/credential_forms.py)
    body: str = ""
    form: bool = False  # body is application/x-www-form-urlencoded (else JSON)
    expected: frozenset[int] = field(default_factory=lambda: frozenset({200}))
    conditional: bool = False  # send If-None-Match with the ETag of a first GET (expect 304)

    @property
    def success(self) -> int:
        """The status a successful request gets (the first preflight must get it)."""
        return 304 if self.conditional else 200


TABLE = f"{{catalog}}/namespaces/{fixtures.NAMESPACE}/tables"
SET_PROPERTY = json.dumps(
    {"requirements": [], "updates": [{"action": "set-properties", "updates": {"k": "{n}"}}]},
    separators=(",", ":"),
)
CREATE_TABLE = json.dumps(
    {
        "name": "t_{n}",
        "schema": {
            "type": "struct",
            "schema-id": 0,
            "fields": [{"id": 1, "name": "id", "type": "long", "required": False}],
        },
    },
    separators=(",", ":"),
)
CREATE_NAMESPACE = json.dumps({"namespace": ["ns_{n}"], "properties": {}}, separators=(",", ":"))
TOKEN_FORM = "{token_form}"  # noqa: S105 - a placeholder, filled per endpoint: the client id and secret differ

OPERATIONS: tuple[Operation, ...] = (
    Operation("config", "GET /v1/config", READ, "GET", "/v1/config{config_query}", 32),
    Operation("list_namespaces", "list namespaces", READ, "GET", "{catalog}/namespaces", 32),
    Operation(
        "load_namespace", "load namespace", READ, "GET", f"{{catalog}}/namespaces/{fixtures.NAMESPACE}", 32
    ),
    Operation("load_table", "loadTable (c32)", READ, "GET", f"{TABLE}/{fixtures.READ_TABLE}", 32),
    Operation("load_table_c1", "loadTable (c1)", READ, "GET", f"{TABLE}/{fixtures.READ_TABLE}", 1),
    Operation(
        "load_table_304",
        "loadTable If-None-Match (304)",
        READ,
        "GET",
        f"{TABLE}/{fixtures.READ_TABLE}",
        32,
        expected=frozenset({304}),
        conditional=True,
    ),
    Operation("list_tables", "list tables", READ, "GET", TABLE, 32),
    Operation(
        "token",
        "token issuance (c8)",
        WRITE,
        "POST",
        "/v1/oauth/tokens",
        8,
        role="",
        body=TOKEN_FORM,
        form=True,
    ),
    Operation(
        "commit_seq",
        "commit, 1 table, sequential",
        WRITE,
        "POST",
        f"{TABLE}/{fixtures.COMMIT_TABLE}",
        1,
        body=SET_PROPERTY,
    ),
    Operation(
        "commit_8x1",
        "commit, 8 writers on 1 table",
        WRITE,
        "POST",
        f"{TABLE}/{fixtures.COMMIT_TABLE}",
        8,
        body=SET_PROPERTY,
        expected=frozenset({200, 409}),
    ),
    Operation(
        "commit_8x8",
        "commit, 8 writers on 8 tables",
        WRITE,
        "POST",
        f"{TABLE}/{fixtures.COMMIT_TABLE}{{t}}",
        fixtures.WRITERS,
        threads=fixtures.WRITERS,
        body=SET_PROPERTY,
    ),
    Operation(
        "create_table",
        "createTable, sequential",
        WRITE,
        "POST",
        f"{{catalog}}/namespaces/{fixtures.SCRATCH_NAMESPACE}/tables",
        1,
        body=CREATE_TABLE,
    ),
    Operation(
        "create_namespace",
        "createNamespace, sequential",
        WRITE,
        "POST",
        "{catalog}/namespaces",
        1,
        role="admin",
        body=CREATE_NAMESPACE,
    ),
    Operation(
        "create_namespace_8",
        "createNamespace, 8 concurrent",
        WRITE,
        "POST",
        "{catalog}/namespaces",
        8,
        role="admin",
        body=CREATE_NAMESPACE,
    ),
)
BY_NAME = {operation.name: operation for operation in OPERATIONS}

ALL = tuple(operation.name for operation in OPERATIONS)
# The writes every store measures at one worker and at one worker per core (issue 32: compared
# with the peer as deployed, with the single-process figures beside them).
WRITES = (
    "commit_seq",
    "commit_8x1",
    "commit_8x8",
    "create_table",
    "create_namespace",
    "create_namespace_8",
)
# One worker per core on SQLite: the writes, and loadTable (what a second worker adds to reads).
PER_CORE_SUBSET = ("load_table", *WRITES)
# TLS (one worker): what TLS changes, the reads' cost per request (and the token endpoint's).
TLS_SUBSET = ("load_table", "load_table_c1", "token")
CEILING = ("load_table", "load_table_c1")
# The PostgreSQL registry at one worker: the reads the targets name, and the writes.
POSTGRES_SUBSET = ("list_namespaces", "load_table", "load_table_c1", "list_tables", *WRITES)
# ... and at one worker per core: the writes, whose targets hold per store.
POSTGRES_PER_CORE_SUBSET = WRITES


def token_form(client_id: str, client_secret: str) -> str:
    return urlencode(
        {"grant_type": "client_credentials", "client_id": client_id, "client_secret": client_secret}
    )


def operations_for(names: tuple[str, ...]) -> list[Operation]:
    return [BY_NAME[name] for name in names]
