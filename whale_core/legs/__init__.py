"""The two legs WHALE alternates and what they need.

- the one interface both implement (`leg`: `Leg.run(LegStart) -> LegResult`);
- the harness leg (`harness_leg`, configured by `harness_config`, the proposer's context from `harness_context`):
  propose harness edits, score them on val problems (`scoring`), keep the winners (`selection`);
- the weights leg (`weights_leg`, configured by `weights_config`; the TRL side in `grpo`): GRPO + LoRA on the
  incumbent harness's prompts, rewarded by `rewards`, optionally on a population of harnesses (`population`);
- what decides between them: the schedule of legs (`schedule`) and the shared rollout budget (`budget`).
"""
