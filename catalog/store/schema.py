"""Relational schema of the registry. Alembic migrations create exactly these tables.

Tables and views share one `catalog_objects` table so that a table and a view can never hold the
same name, which the Iceberg REST spec requires, and so the uniqueness is the database's job.
Foreign keys with RESTRICT make "drop only an empty namespace" a database guarantee even under
concurrent creates.

Nothing readable about a table or view is stored: `metadata` is the sealed copy of the current
metadata (kms.envelope, bound to warehouse, object UUID and metadata version) and the object's data
key is stored only wrapped (`wrapped_key`), beside the KEK URI and version that wrapped it.
Idempotent responses are sealed under the registry's own data key (`registry_keys`), metrics
reports under their table's key. An idempotency record's `key` is not the client's
Idempotency-Key but a keyed hash of (principal, Idempotency-Key) (catalog.idempotency), so the
same key sent by two principals names two records; `request_hash` (a keyed hash of the request)
tells a retry from a different request under the same key.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Column,
    Float,
    ForeignKeyConstraint,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)

metadata = MetaData()

namespaces = Table(
    "namespaces",
    metadata,
    Column("warehouse", String(128), primary_key=True),
    Column("name", String(1024), primary_key=True),
    Column("parent", String(1024), nullable=True),
    Column("properties", Text, nullable=False),
    Column("created_at_ms", BigInteger, nullable=False),
    ForeignKeyConstraint(
        ["warehouse", "parent"],
        ["namespaces.warehouse", "namespaces.name"],
        ondelete="RESTRICT",
        name="fk_namespaces_parent",
    ),
    Index("ix_namespaces_parent", "warehouse", "parent", "name"),
)


def _object_columns() -> list[Column[object]]:
    """What a table or view row holds, live or soft-deleted (fresh Column objects per table)."""
    return [
        Column("kind", String(8), nullable=False),
        Column("uuid", String(36), nullable=False),
        Column("metadata_location", Text, nullable=False),
        Column("metadata", LargeBinary, nullable=False),
        Column("version", Integer, nullable=False),
        Column("kek_uri", String(1024), nullable=False),
        Column("kek_version", String(256), nullable=False),
        Column("wrapped_key", LargeBinary, nullable=False),
    ]


catalog_objects = Table(
    "catalog_objects",
    metadata,
    Column("warehouse", String(128), primary_key=True),
    Column("namespace", String(1024), primary_key=True),
    Column("name", String(255), primary_key=True),
    *_object_columns(),
    Column("updated_at_ms", BigInteger, nullable=False),
    ForeignKeyConstraint(
        ["warehouse", "namespace"],
        ["namespaces.warehouse", "namespaces.name"],
        ondelete="RESTRICT",
        name="fk_objects_namespace",
    ),
    UniqueConstraint("uuid", name="uq_objects_uuid"),
    Index("ix_objects_kind", "warehouse", "namespace", "kind", "name"),
)

idempotency_records = Table(
    "idempotency_records",
    metadata,
    Column("key", String(36), primary_key=True),
    Column("operation", String(512), nullable=False),
    Column("request_hash", String(64), nullable=True),  # NULL only in records older than 0006
    Column("outcome", String(8), nullable=False),
    Column("payload", LargeBinary, nullable=True),
    Column("created_at", Float, nullable=False),
    Index("ix_idempotency_created", "created_at"),
)

metrics_reports = Table(
    "metrics_reports",
    metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("warehouse", String(128), nullable=False),
    Column("namespace", String(1024), nullable=False),
    Column("name", String(255), nullable=False),
    Column("report_type", String(64), nullable=False),
    Column("report", LargeBinary, nullable=False),
    Column("received_at_ms", BigInteger, nullable=False),
    Index("ix_metrics_table", "warehouse", "namespace", "name"),
    Index("ix_metrics_received", "received_at_ms"),  # the retention sweep
)

# Soft-deleted objects of sealed warehouses, kept for the retention, then purged (files deleted,
# row and with it the data key destroyed). No foreign key: the namespace may go meanwhile.
dropped_objects = Table(
    "dropped_objects",
    metadata,
    Column("drop_id", String(36), primary_key=True),
    Column("warehouse", String(128), nullable=False),
    Column("namespace", String(1024), nullable=False),
    Column("name", String(255), nullable=False),
    *_object_columns(),
    Column("moved_files", Text, nullable=False),
    Column("dropped_at_ms", BigInteger, nullable=False),
    Column("purge_after_ms", BigInteger, nullable=False),
    # Purge attempts (catalog.purge_failures): how many were started, why the last one failed, and
    # when the next may start (purge_after_ms until the first attempt). The sweeper picks rows by
    # the next attempt, so an object that keeps failing waits its backoff and never blocks others;
    # it also checks purge_after_ms, so no value here can cut a retention short.
    Column("purge_attempts", Integer, nullable=False, server_default="0"),
    Column("last_purge_error", Text, nullable=True),
    Column("next_purge_attempt_ms", BigInteger, nullable=False, server_default="0"),
    Index("ix_dropped_next_attempt", "next_purge_attempt_ms"),
    Index("ix_dropped_name", "warehouse", "namespace", "name"),
    Index("ix_dropped_uuid", "uuid"),
)

# Data keys that belong to the registry rather than to one object (sealing idempotent responses).
registry_keys = Table(
    "registry_keys",
    metadata,
    Column("name", String(64), primary_key=True),
    Column("uuid", String(36), nullable=False),
    Column("kek_uri", String(1024), nullable=False),
    Column("kek_version", String(256), nullable=False),
    Column("wrapped_key", LargeBinary, nullable=False),
    Column("created_at_ms", BigInteger, nullable=False),
)

# Server-side scan plans (catalog.planning): one row per plan, its result pages beside it, so any
# gateway instance can answer for a plan. Plan ids and page tokens are random (192 bits) and are
# looked up together with the owner and the table: a guessed or borrowed id finds nothing. Pages
# hold file paths and column statistics, so they are sealed under the table's data key.
scan_plans = Table(
    "scan_plans",
    metadata,
    Column("plan_id", String(64), primary_key=True),
    Column("warehouse", String(128), nullable=False),
    Column("table_uuid", String(36), nullable=False),
    Column("namespace", String(1024), nullable=False),
    Column("name", String(255), nullable=False),
    Column("owner", String(512), nullable=False),
    Column("status", String(16), nullable=False),  # submitted | completed | failed | cancelled
    Column("error_kind", String(64), nullable=True),
    Column("error", Text, nullable=True),
    Column("created_at_ms", BigInteger, nullable=False),
    Column("expires_at_ms", BigInteger, nullable=False),
    Index("ix_scan_plans_expires", "expires_at_ms"),
)

scan_plan_pages = Table(
    "scan_plan_pages",
    metadata,
    Column("token", String(64), primary_key=True),
    Column("plan_id", String(64), nullable=False),
    Column("page_no", Integer, nullable=False),
    Column("payload", LargeBinary, nullable=False),
    UniqueConstraint("plan_id", "page_no", name="uq_scan_plan_pages_page"),
)

# The roots of every table and view (catalog.roots), live or soft-deleted, past ones included,
# and the directory of every namespace: the index behind the rule that no two objects' roots
# overlap (catalog.confinement). `root` is the normalised location as UTF-8 bytes, so ranges
# compare byte by byte whatever the database's collation. Rows of an object go when it is purged.
object_roots = Table(
    "object_roots",
    metadata,
    Column("root", LargeBinary, primary_key=True),
    Column("kind", String(16), primary_key=True),  # table | view | namespace
    Column("owner", String(1024), primary_key=True),  # object UUID, or the namespace's key
    Column("warehouse", String(128), nullable=False),
    Index("ix_object_roots_owner", "kind", "owner"),
)
