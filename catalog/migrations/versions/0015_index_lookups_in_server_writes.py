"""The server-side writes look each root up by index, whatever the registry's size (PostgreSQL;
SQLite: nothing).

The functions of 0013 and 0014 asked `EXISTS (SELECT 1 FROM object_roots WHERE root = ANY (p))`,
a range `root > low AND root < high`, and an anti-join of `unnest(p)` against `object_roots`.
PL/pgSQL plans such a statement once per connection and, after five calls, keeps a generic plan
made without the array's contents. For an EXISTS the planner prefers a plan that stops at the
first match, and with a guessed few hundred matches among the table's rows a sequential scan
looks cheapest; the common case has no match, so every namespace creation, create and commit read
the whole of `object_roots`. Measured with pgbench on the bench machine (8 clients, the 0013
statement alone, 150,000 roots): 286 calls a second; as lookups of one root each, 7,954.

Each check now looks one root up at a time: an equality on the primary key's leading column
(`root = $1`, estimated at one row, always an index scan), and the nearest root above a bound
(`root > $1 ORDER BY root LIMIT 1`, the primary key's order) compared with the bound below. What
each function writes and answers is unchanged (the return codes of 0013); the functions keep
their names and arguments, so gateways of before use the new bodies at once.

Revision ID: 0015
Revises: 0014
"""

import importlib.util
from pathlib import Path
from types import ModuleType

from alembic import op

revision = "0015"
down_revision = "0014"

_SWAP_CHECK = """
    -- A root the object does not hold yet is claimed by the general path (lock, checks).
    FOREACH v_root IN ARRAY coalesce(p_roots, '{}') LOOP
        IF NOT EXISTS (
            SELECT 1 FROM object_roots WHERE root = v_root AND kind = p_kind AND owner = p_owner
        ) THEN
            RETURN 2;
        END IF;
    END LOOP;
"""

_SWAP_OBJECT = (
    """
CREATE OR REPLACE FUNCTION cedarberg_swap_object(
    p_warehouse text, p_namespace text, p_name text, p_kind text, p_owner text, p_roots bytea[],
    p_expected text, p_new_location text, p_new_metadata bytea, p_now bigint,
    p_key text, p_operation text, p_request_hash text, p_outcome text, p_payload bytea,
    p_created_at double precision, p_expired_before double precision
) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    v_root bytea;
BEGIN"""
    + _SWAP_CHECK
    + """
    UPDATE catalog_objects
    SET metadata_location = p_new_location, metadata = p_new_metadata, version = version + 1,
        updated_at_ms = p_now
    WHERE warehouse = p_warehouse AND namespace = p_namespace AND name = p_name
      AND metadata_location = p_expected;
    IF NOT FOUND THEN
        RETURN 1;
    END IF;
    PERFORM cedarberg_record_idempotency(
        p_key, p_operation, p_request_hash, p_outcome, p_payload, p_created_at, p_expired_before
    );
    RETURN 0;
END
$$
"""
)

_SWAP_VERSION = (
    """
CREATE OR REPLACE FUNCTION cedarberg_swap_version(
    p_warehouse text, p_namespace text, p_name text, p_kind text, p_owner text, p_roots bytea[],
    p_expected text, p_expected_key bytea, p_new_location text, p_new_metadata bytea, p_now bigint,
    p_key text, p_operation text, p_request_hash text, p_outcome text, p_payload bytea,
    p_created_at double precision, p_expired_before double precision
) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    v_root bytea;
BEGIN"""
    + _SWAP_CHECK
    + """
    UPDATE catalog_objects
    SET metadata_location = p_new_location, metadata = p_new_metadata, version = version + 1,
        updated_at_ms = p_now
    WHERE warehouse = p_warehouse AND namespace = p_namespace AND name = p_name
      AND metadata_location = p_expected AND wrapped_key = p_expected_key;
    IF NOT FOUND THEN
        RETURN 1;
    END IF;
    PERFORM cedarberg_record_idempotency(
        p_key, p_operation, p_request_hash, p_outcome, p_payload, p_created_at, p_expired_before
    );
    RETURN 0;
END
$$
"""
)

# Whether a non-namespace root is recorded at one of `p_ancestors` (the places above a new root).
_ANCESTOR_CHECK = """
    FOREACH v_root IN ARRAY coalesce(p_ancestors, '{}') LOOP
        IF EXISTS (SELECT 1 FROM object_roots WHERE root = v_root AND kind <> 'namespace') THEN
            RETURN 2;
        END IF;
    END LOOP;
"""

_CREATE_OBJECT = (
    """
CREATE OR REPLACE FUNCTION cedarberg_create_object(
    p_warehouse text, p_namespace text, p_name text, p_kind text, p_uuid text,
    p_metadata_location text, p_metadata bytea, p_version integer, p_kek_uri text,
    p_kek_version text, p_wrapped_key bytea, p_now bigint,
    p_check_uuid boolean, p_ns_properties text, p_lock bigint, p_places integer[],
    p_exclusive boolean[], p_roots bytea[], p_above bytea[], p_below bytea[], p_ancestors bytea[],
    p_key text, p_operation text, p_request_hash text, p_outcome text, p_payload bytea,
    p_created_at double precision, p_expired_before double precision
) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    v_properties text;
    v_root bytea;
    v_next bytea;
BEGIN
    IF p_check_uuid AND (
        EXISTS (SELECT 1 FROM catalog_objects WHERE uuid = p_uuid)
        OR EXISTS (SELECT 1 FROM dropped_objects WHERE uuid = p_uuid)
    ) THEN
        RETURN 2;
    END IF;
    IF EXISTS (SELECT 1 FROM object_roots WHERE kind = p_kind AND owner = p_uuid) THEN
        RETURN 2;
    END IF;
    PERFORM cedarberg_lock_roots(p_lock, p_places, p_exclusive);
    -- The placement was checked against these properties; changed since: the general path.
    SELECT properties INTO v_properties FROM namespaces
    WHERE warehouse = p_warehouse AND name = p_namespace;
    IF NOT FOUND OR v_properties::jsonb IS DISTINCT FROM p_ns_properties::jsonb THEN
        RETURN 2;
    END IF;
    -- A root recorded at a candidate, at a place above it that is not a namespace directory,
    -- or strictly between a candidate and the end of its range (below it): the general path.
    FOREACH v_root IN ARRAY coalesce(p_roots, '{}') LOOP
        IF EXISTS (SELECT 1 FROM object_roots WHERE root = v_root) THEN
            RETURN 2;
        END IF;
    END LOOP;"""
    + _ANCESTOR_CHECK
    + """
    FOR i IN 1 .. coalesce(array_length(p_above, 1), 0) LOOP
        SELECT root INTO v_next FROM object_roots WHERE root > p_above[i] ORDER BY root LIMIT 1;
        IF FOUND AND v_next < p_below[i] THEN
            RETURN 2;
        END IF;
    END LOOP;
    IF EXISTS (
        SELECT 1 FROM catalog_objects
        WHERE warehouse = p_warehouse AND namespace = p_namespace AND name = p_name
    ) THEN
        RETURN 1;
    END IF;
    INSERT INTO object_roots (root, kind, owner, warehouse)
    SELECT DISTINCT candidate, p_kind, p_uuid, p_warehouse FROM unnest(p_roots) AS candidate;
    INSERT INTO catalog_objects (
        warehouse, namespace, name, kind, uuid, metadata_location, metadata, version, kek_uri,
        kek_version, wrapped_key, updated_at_ms
    ) VALUES (
        p_warehouse, p_namespace, p_name, p_kind, p_uuid, p_metadata_location, p_metadata,
        p_version, p_kek_uri, p_kek_version, p_wrapped_key, p_now
    );
    PERFORM cedarberg_record_idempotency(
        p_key, p_operation, p_request_hash, p_outcome, p_payload, p_created_at, p_expired_before
    );
    RETURN 0;
END
$$
"""
)

_CREATE_NAMESPACE = (
    """
CREATE OR REPLACE FUNCTION cedarberg_create_namespace(
    p_warehouse text, p_name text, p_parent text, p_properties text, p_now bigint,
    p_directory bytea, p_ancestors bytea[], p_owner text, p_lock bigint, p_places integer[],
    p_exclusive boolean[], p_key text, p_operation text, p_request_hash text, p_outcome text, p_payload bytea,
    p_created_at double precision, p_expired_before double precision
) RETURNS integer LANGUAGE plpgsql AS $$
DECLARE
    v_root bytea;
BEGIN
    PERFORM cedarberg_lock_roots(p_lock, p_places, p_exclusive);"""
    + _ANCESTOR_CHECK
    + """
    INSERT INTO namespaces (warehouse, name, parent, properties, created_at_ms)
    VALUES (p_warehouse, p_name, p_parent, p_properties, p_now);
    INSERT INTO object_roots (root, kind, owner, warehouse)
    VALUES (p_directory, 'namespace', p_owner, p_warehouse);
    PERFORM cedarberg_record_idempotency(
        p_key, p_operation, p_request_hash, p_outcome, p_payload, p_created_at, p_expired_before
    );
    RETURN 0;
END
$$
"""
)


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for body in (_SWAP_OBJECT, _SWAP_VERSION, _CREATE_OBJECT, _CREATE_NAMESPACE):
        op.execute(body)


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    # The bodies of before, as 0013 and 0014 wrote them.
    before, swap = _revision("0013_one_round_trip_writes"), _revision("0014_swap_names_the_version")
    for body in (before._SWAP_OBJECT, before._CREATE_OBJECT, before._CREATE_NAMESPACE, swap._SWAP_VERSION):
        op.execute(body)


def _revision(name: str) -> ModuleType:
    """An earlier revision's module, loaded from its file beside this one (alembic loads revision
    files by path, not as a package's modules)."""
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
