"""A new API key as each engine takes it in: the console's Keys page shows these once, beside the
key, when a key is created or rotated.

The forms say what docs/engines.md says (each is verified there): the gateway's base URL (no
`/v1`), the warehouse by name, and the key as OAuth2 client credentials
`credential=<key id>:<secret>` exchanged at `<url>/v1/oauth/tokens` (Spark, Trino, pyiceberg);
curl sends the whole key as a bearer token. TLS trust (the CA that signed the gateway's
certificate) is each engine's own setting and is named, not filled in: the console does not know
where a reader keeps it.

Pure text building: nothing here reads a request, and nothing is logged.
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from urllib.parse import quote

from cedarberg.gateway.authn.key_format import parse_api_key

CATALOG_NAME = "lake"  # the catalog name the forms use, as docs/engines.md does


@dataclass(frozen=True, slots=True)
class EngineForm:
    """How one engine takes the key: a title, the text to paste, and where it goes."""

    engine: str
    where: str
    text: str


def engine_forms(key: str, url: str, warehouse: str) -> tuple[EngineForm, ...]:
    """The forms of `key` (a whole API key `cbk_<id>_<secret>`) for the gateway at `url` and
    `warehouse`. Raises MalformedKeyError for anything that is not an API key."""
    parsed = parse_api_key(key)
    credential = f"{parsed.key_id}:{parsed.secret}"
    base = url.rstrip("/")
    tokens = f"{base}/v1/oauth/tokens"
    spark = "\n".join(
        f"spark.sql.catalog.{CATALOG_NAME}{name}={value}"
        for name, value in (
            ("", "org.apache.iceberg.spark.SparkCatalog"),
            (".type", "rest"),
            (".uri", base),
            (".warehouse", warehouse),
            (".credential", credential),
            (".oauth2-server-uri", tokens),
            (".cache-enabled", "false"),
        )
    )
    trino = "\n".join(
        (
            "connector.name=iceberg",
            "iceberg.catalog.type=rest",
            f"iceberg.rest-catalog.uri={base}",
            f"iceberg.rest-catalog.warehouse={warehouse}",
            "iceberg.rest-catalog.security=OAUTH2",
            f"iceberg.rest-catalog.oauth2.credential={credential}",
            f"iceberg.rest-catalog.oauth2.server-uri={tokens}",
            "iceberg.rest-catalog.nested-namespace-enabled=true",
            "iceberg.rest-catalog.view-endpoints-enabled=true",
        )
    )
    pyiceberg = "\n".join(
        (
            "from pyiceberg.catalog import load_catalog",
            "",
            "catalog = load_catalog(",
            f"    {json.dumps(CATALOG_NAME)},",
            '    type="rest",',
            f"    uri={json.dumps(base)},",
            f"    warehouse={json.dumps(warehouse)},",
            f"    credential={json.dumps(credential)},",
            "    **{",
            f'        "oauth2-server-uri": {json.dumps(tokens)},',
            '        "ssl": {"cabundle": "ca.pem"},  # the CA that signed the gateway\'s certificate',
            "    },",
            ")",
        )
    )
    namespaces = f"{base}/v1/{quote(warehouse, safe='')}/namespaces"
    curl = f"curl --cacert ca.pem -H {shlex.quote('Authorization: Bearer ' + key)} {shlex.quote(namespaces)}"
    return (
        EngineForm("Spark", f"spark-defaults.conf or --conf (catalog {CATALOG_NAME})", spark),
        EngineForm("Trino", f"etc/catalog/{CATALOG_NAME}.properties", trino),
        EngineForm("pyiceberg", "Python", pyiceberg),
        EngineForm("curl", "list the namespaces of the warehouse", curl),
    )
