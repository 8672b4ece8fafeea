"""Block ascent: the algorithm of a WHALE run, free of any orchestrator.

- `engine`: `BlockAscent`, the loop (decide, ``leg.run``, evaluate, record), the revisits and the best pair;
- `decider`: next leg or stop (the scheduler and the composable stop conditions);
- `calls`: the small interface of the calls an orchestrator caches and retries (`Calls`);
- `local`: those calls in this process (`LocalCalls`), their bodies shared with the Prefect tasks;
- `setup`: what a run opens (its recorder, its engine from a config); `conclude`: a run's end (final test, report).
"""

from whale_core.ascent.calls import Calls, Evaluation, ProposedText, Site, TrainJob
from whale_core.ascent.decider import Decider, Next, Stop
from whale_core.ascent.engine import AscentResult, BlockAscent, Pair, best_pair

__all__ = [
    "AscentResult",
    "BlockAscent",
    "Calls",
    "Decider",
    "Evaluation",
    "Next",
    "Pair",
    "ProposedText",
    "Site",
    "Stop",
    "TrainJob",
    "best_pair",
]
