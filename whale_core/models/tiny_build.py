"""Training the built-in tiny model from scratch: the warm-up described in `whale_core.models.tiny`.

Only ``scripts/ship_tiny_model.py`` (which ships the default recipe's weights), the tests, and the runtime's fallback
where WHALE ships no copy of the recipe (`whale_core.models.policy`, imported lazily) use it; what the runtime needs
(the recipe, the tokenizer, installing the shipped copy) is `whale_core.models.tiny`. The data (which harness
formats, which problems) is `whale_core.models.warmup`'s.
"""

from __future__ import annotations

import contextlib
import json
import math
import random
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from whale_core import seeds
from whale_core.harness import Harness
from whale_core.models.tiny import TinyRecipe, install_tiny_model, make_tokenizer
from whale_core.models.warmup import Sequence_, examples, load_arith_and_sort, warmup_formats
from whale_core.suites.base import Problem

if TYPE_CHECKING:
    from whale_core.suites.base import Suite

__all__ = ["build_tiny_model"]

Progress = Callable[[int, int], None]

# -------------------------------------------------------------------------------------------------- training


@contextlib.contextmanager
def _deterministic(seed: int) -> Iterator[None]:
    """Seeded, deterministic algorithms, one torch thread (restored after).

    One thread: the weights then do not depend on the machine's core count, and on a shared 2-core machine it was
    faster than two (docs/tiny-model.md, "Build cost").
    """
    import torch

    was, threads = torch.are_deterministic_algorithms_enabled(), torch.get_num_threads()
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    try:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            yield
    finally:
        torch.use_deterministic_algorithms(was)
        torch.set_num_threads(threads)


def _batches(tok: Any, seqs: list[Sequence_], batch_size: int, rng: random.Random) -> list[Any]:
    """Sort by length, cut into right-padded batches (ids, labels, mask), shuffle the batches."""
    import torch

    seqs = sorted(seqs, key=lambda s: len(s[0]))
    out = []
    for start in range(0, len(seqs), batch_size):
        chunk = seqs[start : start + batch_size]
        width = max(len(ids) for ids, _ in chunk)
        x = torch.full((len(chunk), width), tok.pad_token_id, dtype=torch.long)
        y = torch.full((len(chunk), width), -100, dtype=torch.long)
        m = torch.zeros((len(chunk), width), dtype=torch.long)
        for r, (ids, labels) in enumerate(chunk):
            x[r, : len(ids)] = torch.tensor(ids)
            y[r, : len(ids)] = torch.tensor(labels)
            m[r, : len(ids)] = 1
        out.append((x, y, m))
    rng.shuffle(out)
    return out


def _train(recipe: TinyRecipe, tok: Any, suites: dict[str, Suite], progress: Progress | None) -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    cfg = LlamaConfig(
        vocab_size=len(tok),
        hidden_size=recipe.hidden_size,
        intermediate_size=recipe.intermediate_size,
        num_hidden_layers=recipe.layers,
        num_attention_heads=recipe.heads,
        num_key_value_heads=recipe.heads,
        max_position_embeddings=recipe.max_positions,
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
        eos_token_id=tok.eos_token_id,
        tie_word_embeddings=True,
    )
    model = LlamaForCausalLM(cfg)
    model.generation_config.pad_token_id = tok.pad_token_id
    model.generation_config.eos_token_id = tok.eos_token_id
    formats = warmup_formats(recipe, suites["arith"], suites["sort"])
    harnesses = [Harness.from_text(f.harness) for f in formats]
    exclude = _exclusions(recipe, suites)
    rng = seeds.rng("whale-tiny", recipe.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=recipe.lr, betas=(0.9, 0.98), weight_decay=recipe.weight_decay)

    def lr_at(step: int) -> float:
        warm = min(1.0, (step + 1) / max(1, recipe.warmup_steps))
        return warm * 0.5 * (1.0 + math.cos(math.pi * step / recipe.steps))

    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_at)
    model.train()
    queue: list[Any] = []
    for step in range(recipe.steps):
        if not queue:
            chunk = min(recipe.bucket_batches, recipe.steps - step) * recipe.batch_size
            queue = _batches(
                tok, examples(recipe, formats, harnesses, suites, tok, rng, chunk, exclude), recipe.batch_size, rng
            )
        x, y, m = queue.pop()
        loss = model(input_ids=x, attention_mask=m, labels=y).loss
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        if progress is not None:
            progress(step + 1, recipe.steps)
    model.eval()
    return model


# ------------------------------------------------------------------------------------------------ evaluation


def _eval_problems(recipe: TinyRecipe, digits: int) -> list[Problem]:
    """The build's evaluation problems for a digit band (deterministic in the seed; excluded from training).

    1-digit sums have only 100 pairs: up to all of them are used and none is held out (for 1 digit, knowing the
    table is the skill). Other bands: ``eval_n`` (3 digits) or ``eval_digits_n`` distinct pairs.
    """
    lo, hi = (0, 9) if digits == 1 else (10 ** (digits - 1), 10**digits - 1)
    width = hi - lo + 1
    n = recipe.eval_n if digits == 3 else recipe.eval_digits_n
    rng = seeds.rng("whale-tiny-eval", recipe.seed, digits)
    out = []
    for idx in rng.sample(range(width**2), min(n, width**2)):
        a, b = lo + idx // width, lo + idx % width
        out.append(Problem(f"arith:{a}+{b}", {"a": str(a), "b": str(b)}, str(a + b), {"digits": digits}))
    return out


def _exclusions(recipe: TinyRecipe, suites: dict[str, Suite]) -> frozenset[str]:
    """Problem ids training must never draw: the arith val/test splits and the build's held-out evaluation sets."""
    ids = {p.id for split in ("val", "test") for p in suites["arith"].problems(split)}
    ids |= {p.id for d in recipe.digit_weights if d > 1 for p in _eval_problems(recipe, d)}
    return frozenset(ids)


def _evaluate(recipe: TinyRecipe, model: Any, tok: Any, suites: dict[str, Suite]) -> dict[str, Any]:
    import torch

    from whale_core.models.handle import Policy
    from whale_core.rollout import rollout

    policy = Policy(model, tok, "warmup", Path("."), None, torch.device("cpu"))
    fmts = warmup_formats(recipe, suites["arith"], suites["sort"])
    formats = {f.name: Harness.from_text(f.harness) for f in fmts}
    arith, sort = suites["arith"], suites["sort"]
    three = _eval_problems(recipe, 3)
    report: dict[str, Any] = {"metric": "greedy exact match on held-out problems (never drawn in training)"}
    report.update(three_digit={}, by_digits={}, sort={})
    n_phr = max(len(recipe.plain_phrasings), len(recipe.reversed_phrasings))
    names = [f"{e}-p{i}-k0" for e in ("plain", "rev") for i in range(n_phr)]
    names += [f"{e}-p0-k{k}" for e in ("plain", "rev") for k in range(1, len(recipe.text_k))]
    names += [f"{e}-p0-chat-k1" for e in ("plain", "rev")]
    for name in names:
        if name in formats:
            r = rollout(policy, formats[name], arith, three, batch_size=256, seed=recipe.seed)
            report["three_digit"][name] = {"accuracy": round(r.score, 4), "n": r.n}
    for name in ("plain-p0-k0", "rev-p0-k0"):
        report["by_digits"][name] = {}
        for d in sorted(recipe.digit_weights):
            if d == 3:
                report["by_digits"][name]["3"] = report["three_digit"][name]
                continue
            r = rollout(policy, formats[name], arith, _eval_problems(recipe, d), batch_size=256, seed=recipe.seed)
            report["by_digits"][name][str(d)] = {"accuracy": round(r.score, 4), "n": r.n}
    sort_val = sort.problems("val")[: recipe.eval_n]
    r = rollout(policy, formats["sort-k0"], sort, sort_val, batch_size=256, seed=recipe.seed)
    report["sort"]["sort-k0"] = {"accuracy": round(r.score, 4), "n": r.n, "split": "val"}
    report["formats"] = {f.name: {"weight": round(f.weight, 6), "harness": f.harness} for f in fmts}
    return report


def _build_env() -> dict[str, str]:
    """What a build's weights depend on besides the recipe: torch, the CPU kernels it dispatched to, the CPU."""
    import platform

    import torch

    cpu = platform.processor()
    with contextlib.suppress(OSError):  # Linux: the CPU's marketing name (platform.processor() is often just x86_64)
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                cpu = value.strip()
                break
    capability = torch.backends.cpu.get_cpu_capability()
    return {"torch": torch.__version__, "cpu_capability": capability, "cpu": cpu, "machine": platform.machine()}


def build_tiny_model(
    home: Path | None = None,
    recipe: TinyRecipe | None = None,
    progress: Progress | None = None,
    *,
    from_scratch: bool = False,
) -> Path:
    """Install (or find cached, or build) the tiny model for ``recipe`` under ``home/models/tiny-<hash>/``.

    Where WHALE ships the recipe's model (the default recipe) it is verified and copied, unless ``from_scratch``;
    otherwise it is trained here, calling ``progress(step, steps)`` after each training step (deterministic per
    recipe and machine kind). A cached model always wins: delete its directory to rebuild. Returns the directory.
    Raises `whale_core.models.shipped.ShippedModelError` where the shipped copy is damaged.
    """
    recipe = recipe or TinyRecipe()
    out = install_tiny_model(
        home, recipe, build=lambda tmp: _build_into(tmp, recipe, progress), from_scratch=from_scratch
    )
    assert out is not None  # with a builder the model is always built or installed
    return out


def _build_into(out: Path, recipe: TinyRecipe, progress: Progress | None) -> None:
    """Train and evaluate ``recipe`` on this machine; write the model, tokenizer, recipe and report into ``out``."""
    t0, c0 = time.perf_counter(), time.process_time()
    arith, sort = load_arith_and_sort()
    suites = {"arith": arith, "sort": sort}
    tok = make_tokenizer()
    with _deterministic(recipe.seed):
        model = _train(recipe, tok, suites, progress)
    train_s, train_cpu = time.perf_counter() - t0, time.process_time() - c0
    report = _evaluate(recipe, model, tok, suites)
    report.update(recipe_hash=recipe.hash(), train_seconds=round(train_s, 1), train_cpu_seconds=round(train_cpu, 1))
    report.update(build_seconds=round(time.perf_counter() - t0, 1), train_threads=1, build_env=_build_env())
    model.save_pretrained(out)
    tok.save_pretrained(out)
    (out / "recipe.json").write_text(json.dumps(recipe.model_dump(mode="json"), indent=2) + "\n")
    (out / "warmup_report.json").write_text(json.dumps(report, indent=2) + "\n")
