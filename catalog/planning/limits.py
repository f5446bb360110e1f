"""The bounds of server-side planning (set from the gateway's `[planning]` settings)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class PlanningLimits:
    max_sync_manifests: int = 64  # a scan reading at most this many manifests is answered at once
    tasks_per_page: int = 1000  # file scan tasks per response page
    max_concurrent_plans: int = 4  # plans computing at once per process (sync and background)
    plan_ttl_seconds: int = 3600  # a plan and its pages live this long
    max_files_per_plan: int = 1_000_000  # manifest entries one plan may select
    retry_after_seconds: int = 5  # what a client at the concurrency bound is told to wait
    sweep_batch: int = 500  # expired plans deleted per statement by the sweep
