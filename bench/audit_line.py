"""What a replayed read pays for the decision record's `cedar_request`: the CPU time of writing one
audit line of a replayed loadTable (`AuditLog.record_template`, then the writer thread's write to
a file) with and without the field, in one process, so the difference is not lost in the noise of
a shared machine as a load test's is.

    .venv/bin/python -m bench.audit_line [--lines 200000] [--rounds 5]

The line is a loadTable decision of a service key on a table two namespaces deep, its
`cedar_request` as `gateway.decision_record` renders it (the principal and its group, the table
and its ancestors with their grants and properties; about 1.5 KB). The CPU time is the process's
(`time.process_time`: the caller and the writer thread), per line, the best of `--rounds`.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from cedarberg.gateway.audit import AuditEvent, AuditLog, EventKind
from cedarberg.gateway.authn.principal import AuthMethod, Principal, PrincipalKind
from cedarberg.gateway.config.audit import AuditSettings

PRINCIPAL = Principal(
    id="key:pipeline-svc",
    kind=PrincipalKind.SERVICE,
    groups=frozenset({"etl"}),
    auth_method=AuthMethod.GATEWAY_TOKEN,
    attributes={"api_key_id": "wnlhlgnx4tc6qmof"},
)
RESOURCE = 'Cedarberg::Table::"default/analytics/daily_revenue"'


def _entity(
    kind: str, uid: str, attrs: dict[str, object], parent: tuple[str, str] | None
) -> dict[str, object]:
    parents = [] if parent is None else [{"type": parent[0], "id": parent[1]}]
    return {"uid": {"type": kind, "id": uid}, "attrs": attrs, "parents": parents}


def _grants(**extra: object) -> dict[str, object]:
    return {
        "readers": ["analysts"],
        "writers": ["etl"],
        "protected_refs": [],
        "schema_locked": False,
        **extra,
    }


TAGS = {"cedarberg.writers": "etl", "cedarberg.readers": "analysts", "owner": "data-platform"}
CEDAR_REQUEST = {
    "principal": {"type": "Cedarberg::User", "id": PRINCIPAL.id},
    "resource": {"type": "Cedarberg::Table", "id": "default/analytics/daily_revenue"},
    "context": {"auth_method": "gateway-token", "client_address": "127.0.0.1"},
    "entities": [
        [
            {
                **_entity("Cedarberg::User", PRINCIPAL.id, {"groups": ["etl"]}, ("Cedarberg::Group", "etl")),
                "tags": {"api_key_id": "wnlhlgnx4tc6qmof"},
            },
            _entity("Cedarberg::Group", "etl", {}, None),
        ],
        [
            {
                **_entity(
                    "Cedarberg::Table",
                    "default/analytics/daily_revenue",
                    _grants(warehouse="default", namespace="analytics", name="daily_revenue"),
                    ("Cedarberg::Namespace", "default/analytics"),
                ),
                "tags": TAGS,
            },
            {
                **_entity(
                    "Cedarberg::Namespace",
                    "default/analytics",
                    _grants(warehouse="default", namespace="analytics", depth=1),
                    ("Cedarberg::Warehouse", "default"),
                ),
                "tags": TAGS,
            },
            {
                **_entity(
                    "Cedarberg::Warehouse",
                    "default",
                    {
                        "warehouse": "default",
                        "readers": [],
                        "writers": [],
                        "protected_refs": [],
                        "schema_locked": False,
                    },
                    ("Cedarberg::Catalog", "cedarberg"),
                ),
                "tags": {},
            },
            _entity("Cedarberg::Catalog", "cedarberg", {}, None),
        ],
    ],
}


def _event(with_request: bool) -> AuditEvent:
    return AuditEvent(
        EventKind.DECISION,
        request_id=None,
        principal=PRINCIPAL,
        action="loadTable",
        resource=RESOURCE,
        policy_ids=["writers-write-granted"],
        policy_version="49174c87eedf19581ae38e43428c7031cc2f7b2782dc9972f0a659a67c9e6dd7",
        client_address="127.0.0.1",
        cedar_request=orjson.Fragment(orjson.dumps(CEDAR_REQUEST)) if with_request else None,
    )


def per_line(directory: Path, with_request: bool, lines: int) -> tuple[float, int]:
    """CPU seconds per replayed line written, and the line's length in bytes."""
    path = directory / f"audit-{int(with_request)}.jsonl"
    log = AuditLog.open(AuditSettings(destination=str(path)))
    try:
        template = log.template(_event(with_request))
        size = len(template.head) + len(template.middle) + len(template.tail) + 24 + 32
        request_id = "eebf2fcc622ae121000000000000000c"
        started = time.process_time()
        for _ in range(lines):
            log.record_template(template, request_id)
        assert log.flush(), "the audit writer failed"
        used = time.process_time() - started
    finally:
        log.close()
        path.unlink(missing_ok=True)
    return used / lines, size


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--lines", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    best: dict[bool, float] = {False: float("inf"), True: float("inf")}
    sizes: dict[bool, int] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.rounds):
            for with_request in (False, True):  # alternated, so drifting load hits both alike
                seconds, sizes[with_request] = per_line(Path(tmp), with_request, args.lines)
                best[with_request] = min(best[with_request], seconds)
    for with_request in (False, True):
        label = "with cedar_request   " if with_request else "without cedar_request"
        print(f"{label}: {sizes[with_request]:5d} bytes/line, {best[with_request] * 1e6:.2f} us CPU/line")
    print(f"cedar_request adds {(best[True] - best[False]) * 1e6:.2f} us CPU per replayed read")


if __name__ == "__main__":
    main()
