"""Show what the gateway's audit log recorded during the demo (used by scripts/demo.sh).

Reads the JSON-lines audit log (``[audit] destination``), prints how many decisions were allowed
and denied per principal, then an excerpt of the denied ones (time, principal, action, resource,
HTTP status, determining policies) and one denied record as written. Exits 1 if the log holds no
denied decision (the demo's analyst must have been refused something).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path
from typing import Any


def load(path: Path) -> list[dict[str, Any]]:
    records = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            records.append(json.loads(line))
    return records


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("audit_log", type=Path)
    parser.add_argument("--limit", type=int, default=8, help="denied decisions to show")
    args = parser.parse_args()
    records = load(args.audit_log)
    decisions = [r for r in records if r.get("event") == "decision"]
    mutations = [r for r in records if r.get("event") == "mutation"]
    counts = Counter((r.get("principal") or "-", r.get("decision")) for r in decisions)
    principals = sorted({p for p, _ in counts})
    print(f"==> audit log {args.audit_log}: {len(decisions)} decisions, {len(mutations)} mutations")
    for principal in principals:
        n_allow, n_deny = counts[(principal, "allow")], counts[(principal, "deny")]
        print(f"      {principal:<16} {n_allow:>5} allowed {n_deny:>4} denied")
    denied = [r for r in decisions if r.get("decision") == "deny"]
    if not denied:
        print("==> no denied decision in the audit log", file=sys.stderr)
        return 1
    print(f"==> denied decisions ({min(args.limit, len(denied))} of {len(denied)}):")
    for r in denied[: args.limit]:
        policies = ",".join(r.get("policy_ids") or []) or "(no permit matched)"
        status = f"  status {r['status']}" if r.get("status") is not None else ""
        print(
            f"      {r.get('time', '')[11:23]}  {r.get('principal')}  {r.get('action')}  "
            f"{r.get('resource')}{status}  {policies}"
        )
    print("==> one of them as written:")
    print("      " + json.dumps(denied[0], separators=(",", ":")))
    return 0


if __name__ == "__main__":
    sys.exit(main())
