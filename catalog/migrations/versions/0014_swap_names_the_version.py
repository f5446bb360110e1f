"""The one-statement swap compares the version, not only its file (PostgreSQL; SQLite: nothing).

`cedarberg_swap_object` (0013) moved a pointer if it still named the metadata file read. A file
location alone does not name a version of an object: a table dropped and its last metadata file
registered again at the same name has the same `metadata_location` and a new data key, so a commit
planned on the row read before the drop passed the swap and sealed the registry's copy under the
old data key (the table could no longer be opened). `cedarberg_swap_version` takes the wrapped
data key read too and moves the pointer only if both are unchanged (what
`catalog.store.objects.swap_object` compares in the general transaction): 1, a lost race,
otherwise.

`cedarberg_swap_object` stays for gateways of before during a rolling upgrade (their commits keep
the old comparison until they are replaced); the downgrade removes only the new function.

Revision ID: 0014
Revises: 0013
"""

from alembic import op

revision = "0014"
down_revision = "0013"

_SWAP_VERSION = """
CREATE OR REPLACE FUNCTION cedarberg_swap_version(
    p_warehouse text, p_namespace text, p_name text, p_kind text, p_owner text, p_roots bytea[],
    p_expected text, p_expected_key bytea, p_new_location text, p_new_metadata bytea, p_now bigint,
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


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(_SWAP_VERSION)


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute("DROP FUNCTION IF EXISTS cedarberg_swap_version")
