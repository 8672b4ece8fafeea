"""The built-in tiny model: a char-level Llama trained from scratch with a short, deliberately weak warm-up.

`build_tiny_model()` puts it under ``<home>/models/tiny-<recipe hash>/`` (model + tokenizer via ``save_pretrained``,
``recipe.json``, ``warmup_report.json``): the default recipe's model **ships with WHALE** and is installed from the
verified copy in seconds (`whale_core.models.shipped`, which also records why: where this recipe crosses its
learning transition depends on the CPU's kernels, 42.8 % vs 2.8 % reversed on two machines); any other recipe, or
``from_scratch=True``, is trained here on the CPU in a few minutes. A cache hit returns at once; an install or build
writes to a temporary directory and renames it into place, so a killed build never leaves a half model; a file lock
makes a concurrent second build wait for the first. The same recipe (seed included) gives identical weights on the
same machine kind (CPU kernels), torch build and thread count; ``warmup_report.json`` records them (``build_env``).

Model: ``LlamaConfig`` 4 layers x 64 hidden (MLP 256, 4 heads, tied embeddings), 0.27 M parameters. Simplified on
purpose from the ~1 M-parameter 4 x 128 model of STACK.md: on this 2-core machine the 128-wide model is ~3x slower
per step and did not get past the plateau within the build budget (1200 steps: 3-digit sums at <=1 %), while the
64-wide one does (see the measured figures below).

Tokenizer: ``tokenizers`` WordLevel over printable ASCII + ``\n`` (+ ``<pad> <bos> <eos> <unk>``), one token per
character, BOS prepended, left padding. Its chat template (`CHAT_TEMPLATE`) emits ``<bos>``, writes each
system/user message on its own line and an assistant message right after the preceding user message, so a chat
harness (system: instruction, user: ``{{ a }}+{{ b }}=``) renders ``<bos>instruction\na+b=`` like the text format.

Warm-up (why weak): supervised training with labels is far stronger than GRPO here (STACK.md: 15 s of it takes
reversed 3-digit sums from 38 to 98 %), so it is kept short on purpose, leaving the RL and harness legs headroom.
**The harness matters by construction**: every training sequence is rendered by a real `Harness`
(`whale_core.models.warmup.warmup_formats()`, evolved from the suites' seed harnesses), so what the model saw is
exactly expressible as a harness; ``warmup_report.json`` holds every format's full text and weight.

- answer encoding: plain (``579``, 15 %) or reversed (``975``, least significant digit first, 85 %). Reversed is
  weighted up because it is the encoding a causal model can compute digit by digit (the carry flows in generation
  order): at 85 % it lands in the band where GRPO learns (~40 % on 3 digits) while plain stays low, so the arith
  seed harness (plain) leaves the harness leg a real find and the reversed format leaves the weights leg room.
  The first recipe (``182937327d8f``, 50/50) learned plain first (60 / 7 %): its seed harness was already the best
  harness and neither leg could improve on it (docs/results.md keeps that history);
- instruction phrasings, which carry the encoding (the model cannot otherwise know it): plain ``Add the two
  numbers.`` (the arith seed harness) / ``What is the sum?`` / ``Add:``; reversed ``Add the two numbers. Write the
  answer reversed (last digit first).`` / ``What is the sum? Write it reversed.`` / ``Add, reversed:``. The first
  reversed phrasing is the seed instruction plus the sentence WHALE's proposers write for that encoding
  (`whale_core.proposers.mutate.describe_encoding`). Simplified on purpose: a 0.3 M-parameter model understands only
  the phrasings it was trained on, where a real LLM would understand any wording of "reversed";
- text mode (the seed template ``{{ instruction }}\na+b=``, separator ``\n``) with 0/1/2 demos (20 % of arith
  sequences), chat mode (instruction once as the system message) with 1–7 demos (80 %: many answers per token);
- loss on answers only: the final answer + EOS and every demo answer + the separator after it (the text before a
  demo answer is exactly that harness rendered with fewer demos, so one sequence trains k = 0..K at once);
- arith problems drawn fresh per digit band (1: 10 %, 2: 40 %, 3: 45 %, 4: 3 %, 5: 2 %), never one of the suite's
  val/test problems or the build's evaluation problems (the 3000-problem train split is too small: trained on it,
  the model memorized it and stayed near 0 on held-out sums); 5 % of sequences are the ``sort`` suite's seed
  harness (0–1 demo) on its train split, so that suite is not at 0.

Measured (default recipe ``c69e56f38ce5``, 1500 steps, the shipped build: Intel Xeon, AVX-512 kernels; greedy
exact match on held-out problems, n = 500 per format on 3-digit sums; the harness names are `warmup_formats` names,
``plain-p0-k0`` is the arith seed harness):

===================================  =======  ========  =================================  =======  ========
format (3-digit sums)                plain    reversed  format (3-digit sums)              plain    reversed
===================================  =======  ========  =================================  =======  ========
p0 k=0 (``Add the two numbers.``)    6.2 %    42.8 %    p0, 1 demo                         5.6 %    40.6 %
p1 k=0 (``What is the sum?``)        4.8 %    44.8 %    p0, 2 demos                        5.6 %    9.8 %
p2 k=0 (``Add:``)                    5.8 %    38.4 %    p0, chat mode, 1 demo              5.8 %    40.6 %
===================================  =======  ========  =================================  =======  ========

By digits (p0, k=0, plain / reversed): 1 digit 63 / 82 % (n = 100), 2 digits 8.0 / 71.6 % (n = 250), 3 digits
6.2 / 42.8 %, 4 and 5 digits 0 / 0 % (n = 250 each). ``sort`` seed harness: 1.3 % (n = 300, val). Build on the
2-core machine (two builds side by side): 268–278 s of training wall time (~0.18 s per step, single thread), ~20 s
of evaluation; an earlier, loaded measurement of the same code took 811 s.

So the harness matters (6 vs 43 % on the same weights, the instruction and answer encoding being the only change).
The transition is sharp and the data mix decides which format crosses it first: at 70 % reversed the same 1500 steps
gave 4.8 % plain / 10.6 % reversed on 3 digits, at 50 % 60.4 % plain / 7.0 % reversed.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from whale_core.harness import Harness
from whale_core.models.warmup import Sequence_, examples, load_arith_and_sort, warmup_formats
from whale_core.suites.base import Problem

if TYPE_CHECKING:
    from whale_core.suites.base import Suite

__all__ = ["TinyRecipe", "build_tiny_model", "make_tokenizer", "tiny_model_dir"]

BUILDER_VERSION = 1
SPECIALS = ("<pad>", "<bos>", "<eos>", "<unk>")
CHARS = (*(chr(c) for c in range(32, 127)), "\n")
CHAT_TEMPLATE = (
    "{{ bos_token }}{%- for m in messages -%}"
    "{%- if m['role'] == 'assistant' -%}{{ m['content'] }}"
    "{%- else -%}{%- if not loop.first -%}{{ '\\n' }}{%- endif -%}{{ m['content'] }}{%- endif -%}"
    "{%- endfor -%}"
)
Progress = Callable[[int, int], None]


class TinyRecipe(BaseModel):
    """Everything that determines the tiny model. ``hash()`` keys the cache (any change rebuilds)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    builder: int = BUILDER_VERSION
    seed: int = 0
    # architecture
    hidden_size: int = 64
    layers: int = 4
    heads: int = 4
    intermediate_size: int = 256
    max_positions: int = 512
    # optimization
    steps: int = Field(default=1500, ge=1)
    batch_size: int = Field(default=32, ge=1)
    lr: float = 2e-3
    warmup_steps: int = 20
    weight_decay: float = 0.0
    bucket_batches: int = 8  # examples of this many batches are sorted by length, then cut into batches
    # data mix and formats
    plain_phrasings: tuple[str, ...] = ("Add the two numbers.", "What is the sum?", "Add:")
    reversed_phrasings: tuple[str, ...] = (
        "Add the two numbers. Write the answer reversed (last digit first).",
        "What is the sum? Write it reversed.",
        "Add, reversed:",
    )
    reversed_share: float = 0.85
    text_k: tuple[float, ...] = (0.5, 0.3, 0.2)  # text mode: P(k = 0, 1, 2) demos
    chat_share: float = 0.8  # share of arith examples in chat mode (instruction once: cheap many-demo sequences)
    chat_k: tuple[float, ...] = (0.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0)  # chat mode: P(k = 0..7) demos
    sort_k: tuple[float, ...] = (0.5, 0.5)
    digit_weights: dict[int, float] = Field(default_factory=lambda: {1: 0.1, 2: 0.4, 3: 0.45, 4: 0.03, 5: 0.02})
    sort_share: float = 0.05
    # evaluation written to warmup_report.json
    eval_n: int = 500
    eval_digits_n: int = 250

    def hash(self) -> str:
        """Short sha256 of the canonical JSON of the recipe."""
        text = json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(text.encode()).hexdigest()[:12]


# ------------------------------------------------------------------------------------------------- tokenizer


def make_tokenizer() -> Any:
    """The char-level tokenizer (a ``PreTrainedTokenizerFast`` with left padding and the chat template)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {t: i for i, t in enumerate(SPECIALS + CHARS)}
    tk = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Split(Regex("(?m)."), behavior="isolated")  # (?m) = dot-all in Oniguruma
    tk.decoder = decoders.Fuse()
    tk.post_processor = processors.TemplateProcessing(single="<bos> $A", special_tokens=[("<bos>", vocab["<bos>"])])
    tok = PreTrainedTokenizerFast(
        tokenizer_object=tk,
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        unk_token="<unk>",
        padding_side="left",
        model_max_length=512,
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok


# -------------------------------------------------------------------------------------------------- training


@contextlib.contextmanager
def _deterministic(seed: int) -> Iterator[None]:
    """Seeded, deterministic algorithms, one torch thread (restored after).

    One thread: the weights then do not depend on the machine's core count, and on a shared 2-core machine it was
    measured ~4x faster than two threads (100 steps: 47 s vs 209 s wall under load).
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
    rng = random.Random(f"whale-tiny:{recipe.seed}")
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
    rng = random.Random(f"whale-tiny-eval:{recipe.seed}:{digits}")
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

    from whale_core.models.policy import Policy
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


# ------------------------------------------------------------------------------------------------------ build


def tiny_model_dir(home: Path | None = None, recipe: TinyRecipe | None = None) -> Path:
    """Where the tiny model for ``recipe`` lives (built or not)."""
    from whale_core.env import whale_home

    recipe = recipe or TinyRecipe()
    return (home or whale_home()) / "models" / f"tiny-{recipe.hash()}"


@contextlib.contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    try:
        import fcntl
    except ImportError:  # no POSIX locks (Windows): atomic rename alone keeps the cache consistent
        yield
        return
    with path.open("w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


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
    from whale_core.models import shipped

    recipe = recipe or TinyRecipe()
    final = tiny_model_dir(home, recipe)
    if (final / "warmup_report.json").exists():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with _file_lock(final.parent / f".{final.name}.lock"):
        if (final / "warmup_report.json").exists():  # built by someone else while we waited
            return final
        source = None if from_scratch else shipped.shipped_dir(recipe.hash())
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
        try:
            if source is not None:
                shipped.install(source, tmp)
            else:
                _build_into(tmp, recipe, progress)
            tmp.chmod(0o755)  # mkdtemp makes it private; the cache is meant to be shared like any other dir
            if final.exists():  # a stale partial dir from an older, non-atomic writer: replace it
                shutil.rmtree(final)
            os.replace(tmp, final)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return final


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
