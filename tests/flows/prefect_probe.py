"""Print, as JSON, every Prefect task run created at or after a given time: name, tags, state name and the name of
the flow run it ran in (``RUN_ID`` for a run's own tasks, ``RUN_ID/iter-NN-<leg>`` inside an iteration).

Run as a subprocess with the same WHALE_HOME / PREFECT_HOME as the run under test. It reads that home's Prefect
database through a temporary server started the way a `whale` command starts one (`whale_core.env.setup_offline_env`,
then WHALE's `flows.prefect_server`, waited for with the CLI's start-up timeout), not through Prefect's own
temporary server: that one waits only ``PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS`` (Prefect's default 20,
counted in 0.1 s sleeps), which a loaded 2-core machine exceeded (measured: 1 of 3 probes beside two CPU hogs
raised "Timed out while attempting to connect to ephemeral Prefect API server"; the probe took 32-50 s there)."""

from __future__ import annotations

import asyncio
import json
import sys
from datetime import datetime

from whale_core.env import setup_offline_env

setup_offline_env()  # before Prefect is imported: offline, no telemetry, the CLI's 120 s start-up timeout

from flows import prefect_server  # noqa: E402  (after the environment is set, before Prefect is imported)

prefect_server.start()


async def _main(since: datetime) -> None:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.sorting import TaskRunSort
    from prefect.settings import get_current_settings

    server = prefect_server.settle()
    if server is not None:
        server.wait(get_current_settings().server.ephemeral.startup_timeout_seconds)
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
