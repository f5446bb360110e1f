"""The names of the column actions of the Iceberg REST spec's `ReadRestrictions` (apache/iceberg
PR #13879: `required-column-projections`).

Names only, so that checking a policy's `@mask` (`gateway.authz.restrictions`, at policy load and
in the offline `policies` tools) needs no pyiceberg; which column types each action applies to is
`catalog.planning.masks`.
"""

from __future__ import annotations

MASK_ALPHANUM = "mask-alphanum"
MASK_TO_FIXED_VALUE = "mask-to-fixed-value"
REPLACE_WITH_NULL = "replace-with-null"
SHOW_FIRST_4 = "show-first-4"
SHOW_LAST_4 = "show-last-4"
TRUNCATE_TO_YEAR = "truncate-to-year"
TRUNCATE_TO_MONTH = "truncate-to-month"
SHA_256_GLOBAL = "sha-256-global"
SHA_256_QUERY_LOCAL = "sha-256-query-local"

MASK_ACTIONS = (
    MASK_ALPHANUM,
    MASK_TO_FIXED_VALUE,
    REPLACE_WITH_NULL,
    SHOW_FIRST_4,
    SHOW_LAST_4,
    TRUNCATE_TO_YEAR,
    TRUNCATE_TO_MONTH,
    SHA_256_GLOBAL,
    SHA_256_QUERY_LOCAL,
)
