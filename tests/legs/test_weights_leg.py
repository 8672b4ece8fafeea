"""The weights leg: rewards, LoRA vs full fine-tuning, resume after a kill, chaining legs, budget accounting.

Training tests use a randomly initialised micro Llama (2 layers x 64 hidden, char-level vocab, built in a second) and
a harness whose parse takes the first integer anywhere in the completion, so a random policy still gets graded
rewards (the similarity shaping) and GRPO's advantages are non-zero. Steps and batches are tiny: these tests check
the mechanics; learning itself is measured in docs/weights-leg.md.
"""

from __future__ import annotations

import json
import os
import signal
import string
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from whale_core.harness import Harness
from whale_core.legs.rewards import SimilarityReward, TaskScoreReward, similarity
from whale_core.legs.weights_leg import Checkpoint, WeightsConfig, completions_per_step, train_weights_leg
from whale_core.suites import load_suite
from whale_core.suites.base import Problem

REPO = Path(__file__).resolve().parents[2]
LOOSE = """
whale_harness: 1
name: loose-sum
instruction: Add.
template: "{{ a }}+{{ b }}="
answer: {reverse: true}
parse: [{regex: '([0-9]+)'}]
decoding: {temperature: 0.0, max_new_tokens: 6, stop: ["\\n"]}
"""
SMALL = dict(per_device_train_batch_size=16, num_generations=4, temperature=1.0, learning_rate=5e-3, shaping_weight=1.0)


def build_micro(path: Path) -> Path:
    """A random char-level Llama (~60k params) and its tokenizer, saved as an HF model dir."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3}
    for c in string.digits + string.ascii_letters + " +=.\n,:-":
        vocab.setdefault(c, len(vocab))
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    tk.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=tk,
        pad_token="<pad>",
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        padding_side="left",
    )
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(vocab),
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=128,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    LlamaForCausalLM(config).save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def micro(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_micro(tmp_path_factory.mktemp("micro") / "model")


def policy(path: Path, adapter: str | None = None) -> Any:
    from whale_core.models import load_policy

    return load_policy(str(path), adapter=adapter, device="cpu", trainable=adapter is not None)


@pytest.fixture(scope="module")
def suite() -> Any:
    return load_suite("arith")


@pytest.fixture(scope="module")
def loose() -> Harness:
    return Harness.from_text(LOOSE)


def safetensors(path: Path) -> dict[str, Any]:
    from safetensors.torch import load_file

    out: dict[str, Any] = {}
    for f in sorted(Path(path).glob("*.safetensors")):
        out.update(load_file(str(f)))
    return out


# ------------------------------------------------------------------------------------------------------- rewards


class _Boom:
    """A harness whose parse pipeline has a bug (raises something that is not an AnswerParseError)."""

    def parse_answer(self, completion: str, problem: object = None) -> str:
        raise RuntimeError("bug in a user's parse step")


class _BadScorer:
    def score(self, answer: str | None, problem: Problem) -> float:
        raise ValueError("scorer bug")


def test_task_score_reward_scores_known_completions(suite: Any) -> None:
    plain = Harness.from_text(suite.seed_harness)
    reverse = plain.evolve(answer={"reverse": True})
    p = Problem(id="123+456", fields={"a": "123", "b": "456"}, answer="579")
    r = TaskScoreReward(plain, suite, [p], stops=plain.spec.decoding.stop)
    completions = ["579\n12+3=15", "578", "abc", "", " 579", "\n579", [{"role": "assistant", "content": "579"}], None]
    assert r(completions=completions, problem_id=[p.id] * len(completions)) == [1, 0, 0, 0, 1, 0, 1, 0]
    assert r.count == len(completions)
    rr = TaskScoreReward(reverse, suite, [p], stops=["\n"])
    assert rr(completions=["975", "579"], problem_id=[p.id, p.id]) == [1.0, 0.0]
    assert TaskScoreReward(_Boom(), suite, [p], stops=[])(completions=["579"], problem_id=[p.id]) == [0.0]
    assert TaskScoreReward(plain, _BadScorer(), [p], stops=[])(completions=["579"], problem_id=[p.id]) == [0.0]
    with pytest.raises(KeyError, match="not in the leg"):
        r(completions=["1"], problem_id=["nope"])
    new = TaskScoreReward(plain.evolve(parse=[{"number": "new"}]), suite, [p], stops=[])
    assert new(completions=["123+456=579", "123 456", "579"], problem_id=[p.id] * 3) == [1.0, 0.0, 1.0]


def test_similarity_reward_is_graded_and_never_raises(suite: Any) -> None:
    plain = Harness.from_text(suite.seed_harness)
    p = Problem(id="123+456", fields={"a": "123", "b": "456"}, answer="579")
    s = SimilarityReward(plain, suite, [p], stops=["\n"])
    got = s(completions=["579", "578", "x", "12"], problem_id=[p.id] * 4)
    assert got[0] == 1.0 and 0.5 < got[1] < 1.0 and got[2] == 0.0 and got[3] == 0.0
    assert SimilarityReward(_Boom(), suite, [p], stops=[])(completions=["579"], problem_id=[p.id]) == [0.0]
    assert similarity("579", "579 ") == 1.0 and similarity("", "") == 1.0


def test_population_rewards_parse_each_completion_with_the_member_that_rendered_it(suite: Any) -> None:
    plain = Harness.from_text(suite.seed_harness)
    reverse = plain.evolve(answer={"reverse": True})
    p = Problem(id="123+456", fields={"a": "123", "b": "456"}, answer="579")
    pop = [(plain, ["\n"]), (reverse, ["\n"])]
    r = TaskScoreReward(plain, suite, [p], stops=["\n"], population=pop)
    got = r(completions=["579", "579", "975", "975"], problem_id=[p.id] * 4, harness_idx=[0, 1, 0, 1])
    assert got == [1.0, 0.0, 0.0, 1.0] and r.count == 4
    assert r(completions=["579"], problem_id=[p.id]) == [1.0]  # no harness_idx column: the incumbent parses
    s = SimilarityReward(plain, suite, [p], stops=["\n"], population=pop)
    assert s(completions=["975"], problem_id=[p.id], harness_idx=[1]) == [1.0]
    with pytest.raises(IndexError, match="outside the population"):
        r(completions=["1"], problem_id=[p.id], harness_idx=[2])


def test_config_validation() -> None:
    with pytest.raises(ValueError, match="multiple of num_generations"):
        WeightsConfig(per_device_train_batch_size=10, num_generations=4)
    with pytest.raises(ValueError, match="extra"):
        WeightsConfig(stepz=3)  # type: ignore[call-arg]
    assert completions_per_step(WeightsConfig(per_device_train_batch_size=32, num_generations=8)) == 32


# ------------------------------------------------------------------------------------------------------ training


class _CountingHarness:
    """Delegates to a harness and counts parse calls: each reward function parses each completion once."""

    def __init__(self, inner: Harness) -> None:
        self.inner = inner
        self.parsed = 0

    def parse_answer(self, completion: str, problem: object = None) -> str:
        self.parsed += 1
        return self.inner.parse_answer(completion)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


@pytest.mark.slow
def test_lora_leg_changes_only_lora_params_and_counts_budget(
    micro: Path, suite: Any, loose: Harness, tmp_path: Path
) -> None:
    base = safetensors(micro)
    counting = _CountingHarness(loose)
    seen: list[int] = []
    cfg = WeightsConfig(steps=5, save_steps=50, **SMALL)  # two rewards: task score + similarity shaping
    pol = policy(micro)
    res = train_weights_leg(
        pol, counting, suite, cfg, out_dir=tmp_path / "leg", max_completions=40, progress=lambda m: seen.append(m.step)
    )
    # the budget: 40 completions allow 2 steps of 16; the count is what the reward functions saw
    assert res.completions == counting.parsed // 2 == 32 and len(res.steps) == 2 and res.checkpoint.step == 2
    assert seen == [1, 2] and res.steps[-1].completions == 32 and res.resumed_from_step is None
    # LoRA: the saved adapter moved away from its init (B starts at 0), the base weights did not move at all
    adapter = safetensors(Path(res.checkpoint.path))
    assert any("lora_B" in k and v.abs().sum() > 0 for k, v in adapter.items())
    trained = {
        k.replace("base_model.model.", "").replace(".base_layer", ""): v.detach()
        for k, v in pol.model.named_parameters()
        if "lora_" not in k
    }
    assert set(base) <= set(trained) | {"lm_head.weight"}
    for name, before in base.items():
        if name in trained:
            assert (trained[name] == before).all(), name
    ck = Checkpoint.load(res.checkpoint.path)
    assert ck == res.checkpoint and ck.is_lora and ck.parent_id is None and ck.harness_sha == loose.sha
    # a finished leg called again returns its stored result
    again = train_weights_leg(policy(micro), counting, suite, cfg, out_dir=tmp_path / "leg", max_completions=40)
    assert again.checkpoint == res.checkpoint and counting.parsed == 64
    with pytest.raises(ValueError, match="less than one step"):
        train_weights_leg(pol, loose, suite, cfg, out_dir=tmp_path / "tiny-budget", max_completions=10)


@pytest.mark.slow
def test_full_finetune_changes_base_params(micro: Path, suite: Any, loose: Harness, tmp_path: Path) -> None:
    cfg = WeightsConfig(steps=2, lora={"enabled": False}, save_steps=50, **SMALL)
    res = train_weights_leg(policy(micro), loose, suite, cfg, out_dir=tmp_path / "full")
    before, after = safetensors(micro), safetensors(Path(res.checkpoint.path))
    assert not res.checkpoint.is_lora and set(before) == set(after)
    assert any(not (after[k] == before[k]).all() for k in before)
    assert (Path(res.checkpoint.path) / "tokenizer.json").is_file()


@pytest.mark.slow
def test_chained_legs_continue_from_the_parent_adapter(micro: Path, suite: Any, loose: Harness, tmp_path: Path) -> None:
    from transformers import TrainerCallback

    cfg = WeightsConfig(steps=2, save_steps=50, **SMALL)
    first = train_weights_leg(policy(micro), loose, suite, cfg, out_dir=tmp_path / "one").checkpoint
    start: dict[str, Any] = {}

    class Snapshot(TrainerCallback):  # type: ignore[misc]
        def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **_: Any) -> None:
            start.update({k: v.detach().clone() for k, v in model.named_parameters() if "lora_" in k})

    second = train_weights_leg(
        policy(micro), loose, suite, cfg, out_dir=tmp_path / "two", parent_checkpoint=first, callbacks=[Snapshot()]
    ).checkpoint
    saved = safetensors(Path(first.path))
    assert start and len(saved) == len(start)
    for name, tensor in saved.items():
        key = next(k for k in start if k.replace(".default", "") == name)
        assert (start[key] == tensor).all(), name
    assert second.parent_id == first.id and second.step == 4 and second.id != first.id


@pytest.mark.slow
def test_population_leg_trains_on_prompts_of_every_member(
    micro: Path, suite: Any, loose: Harness, tmp_path: Path
) -> None:
    other = loose.evolve(instruction="Sum the two numbers.", name="loose-other")
    inc, mem = _CountingHarness(loose), _CountingHarness(other)
    cfg = WeightsConfig(steps=2, save_steps=50, population={"k": 1, "incumbent_weight": 0.5}, **SMALL)
    res = train_weights_leg(policy(micro), inc, suite, cfg, out_dir=tmp_path / "pop", population=[mem, inc])
    # 2 steps x 16 completions, each parsed by its own member for both rewards; both members rendered prompts
    assert inc.parsed + mem.parsed == 2 * 32 and inc.parsed > 0 and mem.parsed > 0
    spec = json.loads((tmp_path / "pop" / "leg_spec.json").read_text())
    assert spec["population"] == [other.sha] and res.checkpoint.harness_sha == loose.sha
    with pytest.raises(ValueError, match="different leg"):  # the same out_dir with another population
        train_weights_leg(policy(micro), loose, suite, cfg, out_dir=tmp_path / "pop")
    # a leg spec written before WeightsConfig gained a (defaulted) field still matches: the leg is not refused
    old = {**spec, "cfg": {k: v for k, v in spec["cfg"].items() if k != "scale_rewards"}}
    (tmp_path / "pop" / "leg_spec.json").write_text(json.dumps(old))
    again = train_weights_leg(policy(micro), inc, suite, cfg, out_dir=tmp_path / "pop", population=[mem])
    assert again.checkpoint == res.checkpoint


RESUME_SCRIPT = """
import sys, time
from pathlib import Path
sys.path.insert(0, {tests!r})
from whale_core.env import setup_offline_env
setup_offline_env(Path({home!r}))
from test_weights_leg import LOOSE, SMALL, policy
from whale_core.harness import Harness
from whale_core.suites import load_suite
from whale_core.legs.weights_leg import WeightsConfig, train_weights_leg
cfg = WeightsConfig(steps=8, save_steps=2, keep_trainer_checkpoints=True, **SMALL)
train_weights_leg(policy(Path({micro!r})), Harness.from_text(LOOSE), load_suite("arith"), cfg,
                  out_dir=Path({out!r}), progress=lambda m: time.sleep(1.0))
"""


@pytest.mark.slow
def test_killed_leg_resumes_from_its_last_trainer_checkpoint(
    micro: Path, suite: Any, loose: Harness, tmp_path: Path
) -> None:
    out = tmp_path / "leg"
    script = RESUME_SCRIPT.format(
        tests=str(Path(__file__).resolve().parent), home=os.environ["WHALE_HOME"], micro=str(micro), out=str(out)
    )
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(script)], cwd=REPO)
    first_ckpt = out / "trainer" / "checkpoint-2" / "trainer_state.json"
    deadline = time.monotonic() + 240
    while not first_ckpt.is_file() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.2)
    time.sleep(0.5)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert first_ckpt.is_file() and not (out / "checkpoint").exists()
    cfg = WeightsConfig(steps=8, save_steps=2, keep_trainer_checkpoints=True, **SMALL)
    res = train_weights_leg(policy(micro), loose, suite, cfg, out_dir=out)
    assert res.resumed_from_step is not None and 2 <= res.resumed_from_step < 8
    assert res.checkpoint.step == 8 and [m.step for m in res.steps] == list(range(1, 9))
    assert res.completions == 8 * 16
    assert json.loads((out / "leg_result.json").read_text())["resumed_from_step"] == res.resumed_from_step


def test_chat_prompts_are_tokenized_by_trl_as_rollouts_tokenize_them(suite: Any) -> None:
    from whale_core.legs.grpo import trl_chat_prompt
    from whale_core.models import make_tokenizer

    tok = make_tokenizer()
    chat = Harness.from_text(suite.seed_harness).evolve(
        messages=[{"role": "system", "content": "{{ instruction }}"}, {"role": "user", "content": "{{ a }}+{{ b }}="}]
    )
    p = suite.problems("train")[0]
    text = chat.render(p, [], tokenizer=tok)
    fixed = trl_chat_prompt(text, tok, chat.name)
    assert text.startswith(tok.bos_token) and not fixed.startswith(tok.bos_token)
    assert tok(fixed).input_ids == tok(text, add_special_tokens=False).input_ids  # TRL's view == rollout's view


# ------------------------------------------------------------------------- memory: micro-batches, completion logits


SUM = """
whale_harness: 1
name: small-sum
instruction: Add the two numbers.
template: "{{ instruction }}\\n{{ a }}+{{ b }}="
parse: [{regex: '([0-9]+)'}]
decoding: {temperature: 0.0, max_new_tokens: 4, stop: ["\\n"]}
"""


class _Recording(_CountingHarness):
    """Delegates to a harness and records every completion it is asked to parse."""

    def __init__(self, inner: Harness) -> None:
        super().__init__(inner)
        self.seen: list[str] = []

    def parse_answer(self, completion: str, problem: object = None) -> str:
        self.seen.append(completion)
        return super().parse_answer(completion)


def _leg_with_spies(model_dir: Path, cfg: WeightsConfig, out: Path, harness: Harness, suite: Any) -> dict[str, Any]:
    """One leg on ``model_dir`` recording the completions parsed, the logged losses, the rows of each backbone pass
    and each LM-head module call while gradients are on (the loss passes; generation runs under no_grad)."""
    import torch
    from transformers import TrainerCallback

    pol, rec = policy(model_dir), _Recording(harness)
    passes: list[int] = []
    head_calls: list[tuple[int, ...]] = []
    losses: list[float] = []

    def backbone(module: Any, inputs: Any, output: Any) -> None:
        if torch.is_grad_enabled():
            passes.append(output.last_hidden_state.shape[0])

    def head(module: Any, inputs: Any, output: Any) -> None:
        if torch.is_grad_enabled():
            head_calls.append(tuple(output.shape))

    class Losses(TrainerCallback):  # type: ignore[misc]
        def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **_: Any) -> None:
            if logs and "loss" in logs:
                losses.append(float(logs["loss"]))

    hooks = [
        pol.model.base_model.register_forward_hook(backbone),
        pol.model.get_output_embeddings().register_forward_hook(head),
    ]
    try:
        res = train_weights_leg(pol, rec, suite, cfg, out_dir=out, callbacks=[Losses()])
    finally:
        for h in hooks:
            h.remove()
    return {"res": res, "seen": rec.seen, "passes": passes, "head": head_calls, "losses": losses, "policy": pol}


@pytest.mark.slow
def test_micro_batched_leg_trains_on_the_same_completions_with_completion_logits_only(
    small_llama_dir: Path, suite: Any, tmp_path: Path
) -> None:
    harness = Harness.from_text(SUM)
    base = dict(steps=1, save_steps=50, per_device_train_batch_size=8, num_generations=4, temperature=1.0,
                learning_rate=1e-2, shaping_weight=1.0)  # fmt: skip
    whole = _leg_with_spies(small_llama_dir, WeightsConfig(**base), tmp_path / "whole", harness, suite)
    split_cfg = WeightsConfig(**base, micro_batch_size=2, gradient_checkpointing=True)
    split = _leg_with_spies(small_llama_dir, split_cfg, tmp_path / "split", harness, suite)
    # the same 8 completions per step (same prompts, same seeds), whatever the micro-batch; each parsed by 2 rewards
    assert len(whole["seen"]) == 16 and whole["seen"] == split["seen"]
    assert whole["res"].completions == split["res"].completions == 8
    # the same objective: 4 accumulated passes of 2 give the one-pass loss (TRL normalises over the whole step)
    assert len(whole["losses"]) == len(split["losses"]) == 1
    assert split["losses"][0] == pytest.approx(whole["losses"][0], rel=1e-4, abs=1e-6)
    # one backbone pass of 8 rows vs 4 passes of 2, and never full logits: the LM head module (which returns
    # rows x positions x vocabulary logits) is not run with gradients on; TRL's fused head projects the hidden states
    # through its weight in tiles and keeps the completion tokens' log-probabilities only
    assert whole["passes"] == [8] and split["passes"] == [2, 2, 2, 2]
    assert whole["head"] == split["head"] == []
    # LoRA weights moved, the base weights did not
    before = safetensors(small_llama_dir)
    for run in (whole, split):
        adapter = safetensors(Path(run["res"].checkpoint.path))
        assert any("lora_B" in k and v.abs().sum() > 0 for k, v in adapter.items())
        trained = {
            k.replace("base_model.model.", "").replace(".base_layer", ""): v.detach()
            for k, v in run["policy"].model.named_parameters()
            if "lora_" not in k
        }
        for name, value in before.items():
            if name in trained:
                assert (trained[name] == value).all(), name


def test_micro_batch_size_is_validated_naming_the_valid_values() -> None:
    from whale_core.legs.weights_config import micro_batching

    with pytest.raises(ValueError, match=r"micro_batch_size \(5\) must divide .* valid values: 1, 2, 4, 8, 16"):
        WeightsConfig(per_device_train_batch_size=16, micro_batch_size=5)
    with pytest.raises(ValueError, match="greater than or equal to 1"):
        WeightsConfig(micro_batch_size=0)
    assert micro_batching(WeightsConfig()) == (64, 1)  # the default: one pass per step, as before
    cfg = WeightsConfig(per_device_train_batch_size=32, num_generations=8, micro_batch_size=4)
    assert micro_batching(cfg) == (4, 8) and completions_per_step(cfg) == 32
    with pytest.raises(ValueError, match="set by WHALE"):
        from whale_core.legs.grpo import grpo_args

        bad = WeightsConfig(extra={"gradient_accumulation_steps": 2})
        grpo_args(bad, Path("/nonexistent"), 1, 4, True, False)


@pytest.mark.slow
def test_train_and_eval_end_completions_by_one_stop_rule(small_llama_dir: Path, suite: Any, tmp_path: Path) -> None:
    """Issue 19: training and evaluation cut completions by one rule (whale_core.stops). Checked on a BPE tokenizer
    whose generation config lists a second end token, as real instruct models' do: the end tokens the weights leg
    gives TRL are the ones rollouts stop on, and the tokens TRL sampled are cut to the same text either way."""
    from whale_core.rollout import rollout
    from whale_core.stops import cut_at_stop, finish

    harness, stops = Harness.from_text(SUM).evolve(decoding={"max_new_tokens": 8}), ["\n"]
    pol = policy(small_llama_dir)
    tok, real = pol.tokenizer, pol.model.generate
    calls: list[tuple[list[int], list[list[int]]]] = []  # (end ids, new tokens per row) of each generate call

    def recording_generate(*args: Any, **kw: Any) -> Any:
        out = real(*args, **kw)
        eos = kw["generation_config"].eos_token_id
        calls.append(([eos] if isinstance(eos, int) else list(eos), out[:, kw["input_ids"].shape[1] :].tolist()))
        return out

    pol.model.generate = recording_generate
    vocab = tok.get_vocab()
    second_end = vocab["="]  # real instruct models list several end tokens; this one is frequent in these prompts
    pol.model.generation_config.eos_token_id = [tok.eos_token_id, second_end]
    rollout(pol, harness, suite, suite.problems("train")[:8])
    cfg = WeightsConfig(steps=1, save_steps=50, per_device_train_batch_size=8, num_generations=4, temperature=1.0)
    train_weights_leg(pol, harness, suite, cfg, out_dir=tmp_path / "leg")
    (eval_ends, _), (train_ends, sampled) = calls[0], calls[-1]
    assert second_end in eval_ends and set(eval_ends) == set(train_ends)
    assert vocab["Ċ"] in eval_ends  # "\n" is one token here: an end token too
    # the tokens TRL sampled, and the same with the second end token placed after the first token
    rows = [r for row in sampled for r in (row, [row[0], second_end, *row[1:]])]
    for row in rows:
        n = next((k + 1 for k, t in enumerate(row) if t in train_ends), len(row))  # TRL's completion mask
        trained = cut_at_stop(tok.decode(row[:n], skip_special_tokens=True), stops)  # TRL's text, the reward's cut
        assert finish(tok, row, eval_ends, stops) == (trained, n)
