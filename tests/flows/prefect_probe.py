"""Print, as JSON, every Prefect task run created at or after a given time: name, tags, state name.

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
    async with get_client() as client:
        offset = 0
        while True:
            batch = await client.read_task_runs(limit=200, offset=offset, sort=TaskRunSort.EXPECTED_START_TIME_DESC)
            if not batch:
                break
            for tr in batch:
                if tr.created is not None and tr.created >= since:
                    out.append({"name": tr.name, "tags": sorted(tr.tags), "state": tr.state.name if tr.state else None})
            offset += len(batch)
    print("PROBE" + json.dumps(out))


if __name__ == "__main__":
    asyncio.run(_main(datetime.fromisoformat(sys.argv[1])))
