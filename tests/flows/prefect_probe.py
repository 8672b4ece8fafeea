"""Print, as JSON, every Prefect task run created at or after a given time: name, tags, state name and the name of
the flow run it ran in (``RUN_ID`` for a run's own tasks, ``RUN_ID/iteration-N`` inside an iteration).

Run as a subprocess with the same PREFECT_HOME as the run under test (its own ephemeral server reads that DB)."""

from __future__ import annotations

import asyncio
import json
import sys
from datetime import datetime


async def _main(since: datetime) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.sorting import TaskRunSort

    out = []
    flow_names: dict[object, str] = {}
    async with get_client() as client:
        offset = 0
        while True:
            batch = await client.read_task_runs(limit=200, offset=offset, sort=TaskRunSort.EXPECTED_START_TIME_DESC)
            if not batch:
                break
            for tr in batch:
                if tr.created is not None and tr.created >= since:
                    if tr.flow_run_id is not None and tr.flow_run_id not in flow_names:
                        flow_names[tr.flow_run_id] = (await client.read_flow_run(tr.flow_run_id)).name
                    out.append(
                        {
                            "name": tr.name,
                            "tags": sorted(tr.tags),
                            "state": tr.state.name if tr.state else None,
                            "flow_run": flow_names.get(tr.flow_run_id, ""),
                        }
                    )
            offset += len(batch)
    print("PROBE" + json.dumps(out))


if __name__ == "__main__":
    asyncio.run(_main(datetime.fromisoformat(sys.argv[1])))
