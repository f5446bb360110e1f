"""A gateway as it runs in production: TLS on, no anonymous access, an admin API key.

    with SecureGateway(tmp_path / "secure", pki=session_pki) as gw:    # or pki=None: a fresh PKI
        gw.url                       # https://127.0.0.1:PORT
        gw.ca_cert                   # PEM of the CA that signed the server certificate
        gw.admin                     # requests.Session: verifies with ca_cert, sends the admin key
        key = gw.create_key("etl-bot", ["etl"])                     # via POST /admin/v1/api-keys
        gw.create_namespace("sales", readers=["bi"], writers=["etl"])
        gw.catalog("w", credential=gw.credential(key))              # pyiceberg over TLS
        gw.token(key)                # a gateway JWT from POST /v1/oauth/tokens

The admin key is bootstrapped offline with ``python -m cedarberg.gateway.cli keys create`` before the
server starts (as an operator would), and the readiness probe authenticates with it. Spark can
only trust a CA fixed when its JVM starts, so tests that use the shared ``spark`` fixture pass
``pki=session_pki``.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import requests

from tests.support.gateway import REPO_ROOT, GatewayProcess, to_toml
from tests.support.tls import make_pki

if TYPE_CHECKING:
    import duckdb
    from pyiceberg.catalog.rest import RestCatalog
    from pyspark.sql import SparkSession

    from tests.support.tls import TestPki

HTTP_TIMEOUT = 30
# Environment variables through which requests replaces a session's own CA bundle.
AMBIENT_CA_VARIABLES = ("REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")
KEY_PREFIX = "cbk_"
ADMIN_PRINCIPAL = "bootstrap-admin"
# Budgets far above what one test module sends, but for failed authentications, which keep the
# gateway's strict default: the security suites run with the limits an operator gets.
GENEROUS_RATE_LIMITS = {
    "per_address": "100000/minute",
    "read": "100000/minute",
    "write": "100000/minute",
    "admin": "100000/minute",
    "token": "100000/minute",
}


def split_key(key: str) -> tuple[str, str]:
    """``cbk_<id>_<secret>`` -> ``(id, secret)``: the OAuth2 client id and client secret.

    The id has a fixed length (16); the secret may itself contain ``_``.
    """
    if not key.startswith(KEY_PREFIX) or len(key) != 64 or key[20] != "_":
        raise ValueError("not an API key")
    return key[4:20], key[21:]


def keys_create(
    data_dir: Path,
    principal: str,
    groups: Sequence[str],
    *,
    config_path: Path | None = None,
    store_url: str | None = None,
    kind: str = "user",
) -> str:
    """Run ``cedarberg keys create`` offline against a gateway's store; returns the printed key
    (and fails unless the key is the only thing printed). `kind`: ``user`` (``--person``) or
    ``service`` (``--service``)."""
    owner = "--person" if kind == "user" else "--service"
    argv = [
        sys.executable, "-m", "cedarberg.gateway.cli", "keys", "create",
        owner, principal, "--data-dir", str(data_dir),
    ]  # fmt: skip
    if config_path is not None:
        argv += ["--config", str(config_path)]
    for group in groups:
        argv += ["--group", group]
    if store_url:
        argv += ["--store-url", store_url]
    done = subprocess.run(argv, cwd=REPO_ROOT, capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"keys create failed ({done.returncode}):\n{done.stderr[-4000:]}")
    lines = done.stdout.strip().splitlines()
    if len(lines) != 1:
        raise RuntimeError(f"keys create printed {len(lines)} lines, expected only the key")
    split_key(lines[0])  # raises if it is not a key
    return lines[0]


class SecureGateway:
    """A ``GatewayProcess`` with TLS, authentication required and a bootstrapped admin key."""

    def __init__(
        self,
        directory: Path | str,
        *,
        pki: TestPki | None = None,
        store_url: str | None = None,
        config: Mapping[str, Any] | None = None,
        admin_principal: str = ADMIN_PRINCIPAL,
    ) -> None:
        self.directory = Path(directory).resolve()
        self._pki = pki
        self.store_url = store_url
        self.extra_config = dict(config or {})
        self.admin_principal = admin_principal
        self.gateway: GatewayProcess | None = None
        self.admin_key = ""
        self.admin = _session()
        self._prefix: str | None = None
        self.issued_secrets: list[str] = []  # every key and token handed out, for log checks

    # -- life cycle --------------------------------------------------------------------------

    @property
    def pki(self) -> TestPki:
        if self._pki is None:
            self._pki = make_pki(self.directory / "pki")
        return self._pki

    def start(self) -> SecureGateway:
        self.directory.mkdir(parents=True, exist_ok=True)
        pki = self.pki
        config: dict[str, Any] = {
            "tls": {"cert_file": str(pki.server_cert), "key_file": str(pki.server_key)},
            "rate_limits": dict(GENEROUS_RATE_LIMITS),
            **self.extra_config,
        }
        data_dir = self.directory / "gateway"
        data_dir.mkdir(parents=True, exist_ok=True)
        config_path = data_dir.parent / f"{data_dir.name}.toml"
        config_path.write_text(to_toml(config))
        self.admin_key = self.bootstrap_key(data_dir, config_path, self.admin_principal, ["admins"])
        self.issued_secrets.append(self.admin_key)
        self.gateway = GatewayProcess(
            data_dir,
            store_url=self.store_url,
            config=config,
            anonymous=False,
            ca_cert=pki.ca_cert,
            probe_headers={"Authorization": f"Bearer {self.admin_key}"},
        )
        self.admin.verify = str(pki.ca_cert)
        self.admin.headers["Authorization"] = f"Bearer {self.admin_key}"
        self.gateway.start()
        return self

    def bootstrap_key(self, data_dir: Path, config_path: Path, principal: str, groups: Sequence[str]) -> str:
        """``cedarberg keys create`` against the store, offline; returns the printed key."""
        return keys_create(data_dir, principal, groups, config_path=config_path, store_url=self.store_url)

    def stop(self) -> None:
        if self.gateway is not None:
            self.gateway.stop()
        self.admin.close()

    def __enter__(self) -> SecureGateway:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def log_text(self) -> str:
        return self.gateway.log_text() if self.gateway is not None else ""

    # -- addresses ---------------------------------------------------------------------------

    @property
    def process(self) -> GatewayProcess:
        if self.gateway is None:
            raise RuntimeError("SecureGateway not started")
        return self.gateway

    @property
    def url(self) -> str:
        """``https://127.0.0.1:PORT``."""
        return self.process.url

    @property
    def ca_cert(self) -> Path:
        return self.pki.ca_cert

    @property
    def token_url(self) -> str:
        return f"{self.url}/v1/oauth/tokens"

    @property
    def prefix(self) -> str:
        """The default warehouse's route prefix (from ``GET /v1/config``, as an admin)."""
        if self._prefix is None:
            response = self.admin.get(f"{self.url}/v1/config", timeout=HTTP_TIMEOUT)
            response.raise_for_status()
            self._prefix = str(response.json().get("overrides", {}).get("prefix", ""))
        return self._prefix

    def catalog_url(self, path: str) -> str:
        """``https://.../v1/{prefix}/{path}``."""
        root = f"{self.url}/v1/{quote(self.prefix, safe='')}" if self.prefix else f"{self.url}/v1"
        return f"{root}/{path.lstrip('/')}"

    @staticmethod
    def ns_path(*levels: str) -> str:
        return quote("\x1f".join(levels), safe="")

    # -- keys and tokens ---------------------------------------------------------------------

    def create_key(self, principal: str, groups: Sequence[str], kind: str = "service") -> str:
        """A new API key through ``POST /admin/v1/api-keys`` (as the bootstrap admin)."""
        response = self.admin.post(
            f"{self.url}/admin/v1/api-keys",
            json={"principal": principal, "kind": kind, "groups": list(groups)},
            timeout=HTTP_TIMEOUT,
        )
        if response.status_code not in (200, 201):
            raise RuntimeError(f"creating a key failed: {response.status_code} {response.text}")
        key = str(response.json()["key"])
        split_key(key)
        self.issued_secrets.append(key)
        return key

    @staticmethod
    def credential(key: str) -> str:
        """``<client_id>:<client_secret>`` for an engine's ``credential`` property."""
        client_id, secret = split_key(key)
        return f"{client_id}:{secret}"

    def token(self, key: str) -> str:
        """A gateway access token (JWT) for ``key`` via the client-credentials grant."""
        client_id, secret = split_key(key)
        response = requests.post(
            self.token_url,
            data={"grant_type": "client_credentials", "client_id": client_id, "client_secret": secret},
            verify=str(self.ca_cert),
            timeout=HTTP_TIMEOUT,
        )
        if response.status_code != 200:
            raise RuntimeError(f"token request failed: {response.status_code} {response.text}")
        token = str(response.json()["access_token"])
        self.issued_secrets.append(token)
        return token

    def session(self, key: str | None = None) -> requests.Session:
        """A ``requests.Session`` trusting the CA, sending ``key`` as a bearer credential if given."""
        session = _session()
        session.verify = str(self.ca_cert)
        if key is not None:
            session.headers["Authorization"] = f"Bearer {key}"
        return session

    # -- catalog set-up (as the admin) -------------------------------------------------------

    def create_namespace(
        self,
        *levels: str,
        readers: Sequence[str] = (),
        writers: Sequence[str] = (),
        properties: Mapping[str, str] | None = None,
    ) -> None:
        """Create a namespace granting read to ``readers`` and read+write to ``writers``."""
        props = dict(properties or {})
        if readers:
            props["cedarberg.readers"] = ",".join(readers)
        if writers:
            props["cedarberg.writers"] = ",".join(writers)
        response = self.admin.post(
            self.catalog_url("namespaces"),
            json={"namespace": list(levels), "properties": props},
            timeout=HTTP_TIMEOUT,
        )
        if response.status_code != 200:
            raise RuntimeError(f"creating namespace {levels} failed: {response.status_code} {response.text}")

    # -- clients ---------------------------------------------------------------------------

    def catalog(self, name: str = "secure", **props: str) -> RestCatalog:
        """A pyiceberg ``RestCatalog`` over TLS (``ssl.cabundle`` = the CA) with ``props``
        (``credential``, ``token``, ``warehouse``, ...).

        pyiceberg sets ``ssl.cabundle`` as its requests session's ``verify``, which requests
        overrides with ``REQUESTS_CA_BUNDLE``/``CURL_CA_BUNDLE`` when those are set
        (psf/requests#3829): use it with those variables removed (``AMBIENT_CA_VARIABLES``).
        """
        from pyiceberg.catalog.rest import RestCatalog

        properties: dict[str, Any] = {"uri": self.url, "ssl": {"cabundle": str(self.ca_cert)}}
        if "credential" in props:
            properties["oauth2-server-uri"] = self.token_url
        properties.update(props)
        return RestCatalog(name, **properties)

    def admin_catalog(self, name: str = "secure-admin") -> RestCatalog:
        return self.catalog(name, token=self.admin_key)

    def duckdb(
        self,
        key: str | None,
        *,
        alias: str = "cat",
        warehouse: str = "default",
        trust: bool = True,
    ) -> duckdb.DuckDBPyConnection:
        """DuckDB with the gateway attached as ``alias`` through an iceberg secret holding
        ``key``'s client id and secret (DuckDB sends them to the token endpoint as HTTP Basic).

        ``trust``: point DuckDB at the CA (``SET ca_cert_file``); without it DuckDB (curl with the
        system trust store) must refuse the server certificate.
        """
        from tests.support.engines import duckdb_connect

        con = duckdb_connect()
        try:
            con.execute("SET enable_server_cert_verification = true")
            if trust:
                con.execute(f"SET ca_cert_file = {_sql(str(self.ca_cert))}")
            if key is not None:
                client_id, secret = split_key(key)
                duckdb_secret(con, f"{alias}_secret", client_id, secret, self.token_url)
                con.execute(
                    f"ATTACH {_sql(warehouse)} AS {alias} "
                    f"(TYPE iceberg, ENDPOINT {_sql(self.url)}, SECRET {alias}_secret)"
                )
        except BaseException:
            con.close()
            raise
        return con

    def add_spark_catalog(self, spark: SparkSession, name: str, **props: str) -> str:
        """Declare REST catalog ``name`` on a running SparkSession (``spark.sql.catalog.<name>.*``
        are read when the catalog is first used) and return ``name``. The session's JVM must
        already trust ``ca_cert`` (see the ``spark`` fixture's ``session_pki``)."""
        prefix = f"spark.sql.catalog.{name}"
        settings = {
            prefix: "org.apache.iceberg.spark.SparkCatalog",
            f"{prefix}.type": "rest",
            f"{prefix}.uri": self.url,
            f"{prefix}.cache-enabled": "false",
        }
        if "credential" in props:
            settings[f"{prefix}.oauth2-server-uri"] = self.token_url
        settings.update({f"{prefix}.{key}": value for key, value in props.items()})
        for key, value in settings.items():
            spark.conf.set(key, value)
        return name


def _session() -> requests.Session:
    # requests lets REQUESTS_CA_BUNDLE / CURL_CA_BUNDLE from the environment override a session's
    # `verify` (psf/requests#3829); the sessions made here trust exactly the test CA instead.
    session = requests.Session()
    session.trust_env = False
    return session


def duckdb_secret(
    con: duckdb.DuckDBPyConnection, name: str, client_id: str, client_secret: str, token_url: str
) -> None:
    """``CREATE SECRET name (TYPE iceberg, CLIENT_ID, CLIENT_SECRET, OAUTH2_SERVER_URI)``; DuckDB
    fetches a token at once, so a wrong secret fails here."""
    con.execute(
        f"CREATE SECRET {name} (TYPE iceberg, CLIENT_ID {_sql(client_id)}, "
        f"CLIENT_SECRET {_sql(client_secret)}, OAUTH2_SERVER_URI {_sql(token_url)})"
    )


def _sql(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"
