"""Server-side functions for the registry's common writes on PostgreSQL (SQLite: nothing).

Each function does one write's read-check-write inside the statement that calls it, so a table
commit, a table or view create and a namespace creation cost one round trip to PostgreSQL, run in
autocommit (the statement's own transaction) and prepared once per connection
(catalog.store.server_writes). Each either makes the whole change or writes nothing and answers
why not:

- 0: done (with the idempotency record, when one was given);
- 1: lost race (the pointer moved since it was read, or the name was taken since it was planned);
- 2: not the common case (roots to claim, a possible conflict, namespace properties changed since
  they were read): the caller runs its general transaction, which decides (and words the refusal)
  as it always did.

A constraint violation (a name, UUID or idempotency key taken concurrently, a parent gone) is
raised as by any statement: the statement's transaction rolls back whole, and the caller runs its
general transaction too.

Changes of roots lock as catalog.store.roots.lock does (`cedarberg_lock_roots`, which the general
transaction calls too): the roots lock shared, then one lock per place, the new roots exclusive
and every place above them shared, so only claims at overlapping places wait for each other.

The roots rule here is the one catalog.confinement applies for an object that holds no roots yet:
a candidate conflicts with any recorded root equal to it or below it, and with any root above it
that is not a namespace directory. A namespace directory conflicts with any table's or view's
root equal to it or above it.

Revision ID: 0013
Revises: 0012
"""

from alembic import op

revision = "0013"
down_revision = "0012"

_RECORD_IDEMPOTENCY = """
CREATE OR REPLACE FUNCTION cedarberg_record_idempotency(
    p_key text, p_operation text, p_request_hash text, p_outcome text, p_payload bytea,
    p_created_at double precision, p_expired_before double precision
) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
    IF p_key IS NULL THEN
        RETURN;
    END IF;
    DELETE FROM idempotency_records WHERE key = p_key AND created_at < p_expired_before;
    INSERT INTO idempotency_records (key, operation, request_hash, outcome, payload, created_at)
    VALUES (p_key, p_operation, p_request_hash, p_outcome, p_payload, p_created_at);
END
$$
"""

_LOCK_ROOTS = """
CREATE OR REPLACE FUNCTION cedarberg_lock_roots(
    p_lock bigint, p_places integer[], p_exclusive boolean[]
) RETURNS integer LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_advisory_xact_lock_shared(p_lock);
    -- Places are keyed (1919905652 = "root", a key space of their own, p_places[i]).
    FOR i IN 1 .. coalesce(array_length(p_places, 1), 0) LOOP
        IF p_exclusive[i] THEN
            PERFORM pg_advisory_xact_lock(1919905652, p_places[i]);
        ELSE
            PERFORM pg_advisory_xact_lock_shared(1919905652, p_places[i]);
        END IF;
    END LOOP;
    RETURN 0;
END
$$
"""

_SWAP_OBJECT = """
CREATE OR REPLACE FUNCTION cedarberg_swap_object(
    p_warehouse text, p_namespace text, p_name text, p_kind text, p_owner text, p_roots bytea[],
    p_expected text, p_new_location text, p_new_metadata bytea, p_now bigint,
    p_key text, p_operation text, p_request_hash text, p_outcome text, p_payload bytea,
    p_created_at double precision, p_expired_before double precision
) RETURNS integer LANGUAGE plpgsql AS $$
BEGIN
    -- A root the object does not hold yet is claimed by the general path (lock, checks).
    IF EXISTS (
        SELECT 1 FROM unnest(p_roots) AS candidate(root)
        WHERE NOT EXISTS (
            SELECT 1 FROM object_roots held
            WHERE held.kind = p_kind AND held.owner = p_owner AND held.root = candidate.root
        )
    ) THEN
        RETURN 2;
    END IF;
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

_CREATE_OBJECT = """
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
    IF EXISTS (SELECT 1 FROM object_roots WHERE root = ANY (p_roots))
        OR EXISTS (SELECT 1 FROM object_roots WHERE root = ANY (p_ancestors) AND kind <> 'namespace')
        OR EXISTS (
            SELECT 1 FROM unnest(p_above, p_below) AS bound(low, high)
            WHERE EXISTS (
                SELECT 1 FROM object_roots WHERE root > bound.low AND root < bound.high
            )
        )
    THEN
        RETURN 2;
    END IF;
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

_CREATE_NAMESPACE = """
CREATE OR REPLACE FUNCTION cedarberg_create_namespace(
    p_warehouse text, p_name text, p_parent text, p_properties text, p_now bigint,
    p_directory bytea, p_ancestors bytea[], p_owner text, p_lock bigint, p_places integer[],
    p_exclusive boolean[], p_key text, p_operation text, p_request_hash text, p_outcome text, p_payload bytea,
    p_created_at double precision, p_expired_before double precision
) RETURNS integer LANGUAGE plpgsql AS $$
BEGIN
    PERFORM cedarberg_lock_roots(p_lock, p_places, p_exclusive);
    IF EXISTS (SELECT 1 FROM object_roots WHERE root = ANY (p_ancestors) AND kind <> 'namespace') THEN
        RETURN 2;
    END IF;
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

_FUNCTIONS = (
    ("cedarberg_record_idempotency", _RECORD_IDEMPOTENCY),
    ("cedarberg_lock_roots", _LOCK_ROOTS),
    ("cedarberg_swap_object", _SWAP_OBJECT),
    ("cedarberg_create_object", _CREATE_OBJECT),
    ("cedarberg_create_namespace", _CREATE_NAMESPACE),
)


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for _name, body in _FUNCTIONS:
        op.execute(body)


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    for name, _body in reversed(_FUNCTIONS):
        op.execute(f"DROP FUNCTION IF EXISTS {name}")
