"""Settings of server-side scan planning (`[planning]`). Every bound has a safe default."""

from __future__ import annotations

from pydantic import Field

from cedarberg.catalog.planning.limits import PlanningLimits
from cedarberg.gateway.config.base import FrozenSettings

_DEFAULTS = PlanningLimits()


class PlanningSettings(FrozenSettings):
    max_sync_manifests: int = Field(
        _DEFAULTS.max_sync_manifests,
        ge=0,
        le=100_000,
        description="A scan whose snapshot has at most this many manifests is planned during the "
        "request and answered 'completed'; a larger one is answered 'submitted' with a plan id and "
        "planned in the background (clients poll fetchPlanningResult). 0: always in the background.",
    )
    tasks_per_page: int = Field(
        _DEFAULTS.tasks_per_page,
        ge=1,
        le=100_000,
        description="File scan tasks per response; the rest of a plan is fetched page by page "
        "through its plan-tasks (fetchScanTasks).",
    )
    max_concurrent_plans: int = Field(
        _DEFAULTS.max_concurrent_plans,
        ge=1,
        le=1024,
        description="Plans computing at once per worker (during requests and in the background). "
        "Beyond it planTableScan answers 503 with Retry-After instead of queueing.",
    )
    plan_ttl_seconds: int = Field(
        _DEFAULTS.plan_ttl_seconds,
        ge=1,
        le=7 * 24 * 3600,
        description="How long a plan and its result pages are kept; afterwards its plan id and "
        "plan tasks answer 404. A background plan whose worker died stays 'submitted' until then.",
    )
    max_files_per_plan: int = Field(
        _DEFAULTS.max_files_per_plan,
        ge=1,
        le=100_000_000,
        description="Most manifest entries one plan may select; a larger scan fails with 422 "
        "(narrow it with a filter, or plan on the client).",
    )
    retry_after_seconds: int = Field(
        _DEFAULTS.retry_after_seconds,
        ge=1,
        le=3600,
        description="Retry-After sent with the 503 answer at the concurrency bound.",
    )
    sweep_interval_seconds: float = Field(
        60.0, gt=0, le=86_400, description="How often expired plans and their pages are deleted."
    )

    def limits(self) -> PlanningLimits:
        return PlanningLimits(
            max_sync_manifests=self.max_sync_manifests,
            tasks_per_page=self.tasks_per_page,
            max_concurrent_plans=self.max_concurrent_plans,
            plan_ttl_seconds=self.plan_ttl_seconds,
            max_files_per_plan=self.max_files_per_plan,
            retry_after_seconds=self.retry_after_seconds,
        )
