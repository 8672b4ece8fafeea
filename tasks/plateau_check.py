"""``plateau-check``: the scheduler's decision for the next leg, from the metric history."""

from __future__ import annotations

from prefect import task

from tasks import fault
from tasks.cache import content_cache_key
from whale_core.legs.schedule import Decision, LegOutcome, ScheduleConfig, make_scheduler


@task(name="plateau-check", cache_key_fn=content_cache_key(), persist_result=True)
def plateau_check(history: list[LegOutcome], mode: str, schedule: ScheduleConfig, iteration: int) -> Decision:
    decision = make_scheduler(mode, schedule).next_leg(history)
    fault.point("plateau-check")
    return decision
