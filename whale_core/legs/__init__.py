"""The two legs WHALE alternates and what they need.

- the harness leg (`harness_leg`): propose harness edits, score them on val problems (`scoring`), keep the winners
  (`selection`);
- the weights leg (`weights_leg`, configured by `weights_config`): GRPO + LoRA on the incumbent harness's prompts,
  rewarded by `rewards`, optionally on a population of harnesses (`population`);
- what decides between them: the schedule of legs (`schedule`) and the shared rollout budget (`budget`).
"""
