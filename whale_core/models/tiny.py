"""The built-in tiny model: a char-level Llama trained from scratch with a short, deliberately weak warm-up.

This module is what the runtime needs: the recipe (`TinyRecipe`, whose hash names the model), the char-level
tokenizer (`make_tokenizer`), where the model lives (`tiny_model_dir`) and `install_tiny_model`, which finds it
cached or installs the shipped copy. Training it from scratch (the warm-up below) is
`whale_core.models.tiny_build.build_tiny_model` (with `whale_core.models.warmup`'s data), used by
``scripts/ship_tiny_model.py``, the tests, and `whale_core.models.policy` only where WHALE ships no copy.

`install_tiny_model()` and `build_tiny_model()` put it under ``<home>/models/tiny-<recipe hash>/`` (model + tokenizer
via ``save_pretrained``, ``recipe.json``, ``warmup_report.json``): the default recipe's model **ships with WHALE**
and is installed from the verified copy in seconds (`whale_core.models.shipped`, which also records why: where this
recipe crosses its learning transition depends on the CPU's kernels; figures in docs/tiny-model.md); any other
recipe, or ``from_scratch=True``, is trained here on the CPU in a few minutes. A cache hit returns at once; an
install or build writes to a temporary directory and renames it into place, so a killed build never leaves a half
model; a file lock makes a concurrent second build wait for the first. The same recipe (seed included) gives
identical weights on the same machine kind (CPU kernels), torch build and thread count; ``warmup_report.json``
records them (``build_env``).

Model: ``LlamaConfig`` 4 layers x 64 hidden (MLP 256, 4 heads, tied embeddings), 0.27 M parameters. Simplified on
purpose from the ~1 M-parameter 4 x 128 model of STACK.md: the wider model was slower per step and did not get past
the plateau within the build budget (measured: docs/tiny-model.md).

Tokenizer: ``tokenizers`` WordLevel over printable ASCII + ``\n`` (+ ``<pad> <bos> <eos> <unk>``), one token per
character, BOS prepended, left padding. Its chat template (`CHAT_TEMPLATE`) emits ``<bos>``, writes each
system/user message on its own line and an assistant message right after the preceding user message, so a chat
harness (system: instruction, user: ``{{ a }}+{{ b }}=``) renders ``<bos>instruction\na+b=`` like the text format.

Warm-up (why weak): supervised training with labels is far stronger than GRPO here (docs/tiny-model.md), so it is
kept short on purpose, leaving the RL and harness legs headroom.
**The harness matters by construction**: every training sequence is rendered by a real `Harness`
(`whale_core.models.warmup.warmup_formats()`, evolved from the suites' seed harnesses), so what the model saw is
exactly expressible as a harness; ``warmup_report.json`` holds every format's full text and weight.

- answer encoding: plain (``579``, 15 %) or reversed (``975``, least significant digit first, 85 %). Reversed is
  weighted up because it is the encoding a causal model can compute digit by digit (the carry flows in generation
  order): at 85 % it lands in the band where GRPO learns while plain stays low, so the arith seed harness (plain)
  leaves the harness leg a real find and the reversed format leaves the weights leg room. The first recipe
  (``182937327d8f``, 50/50) learned plain first: its seed harness was already the best harness and neither leg could
  improve on it (docs/tiny-model.md; docs/results.md keeps that history);
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

Measured (the default recipe's accuracy per format and digit count, its build time, how the data mix moves the
transition): docs/tiny-model.md. In short, the harness matters by construction: the same weights score several
times higher under the reversed-answer harness than under the arith seed harness.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from whale_core.process import file_lock

__all__ = ["TinyRecipe", "install_tiny_model", "make_tokenizer", "tiny_model_dir"]

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


# ---------------------------------------------------------------------------------------------------- install


def tiny_model_dir(home: Path | None = None, recipe: TinyRecipe | None = None) -> Path:
    """Where the tiny model for ``recipe`` lives (built or not)."""
    from whale_core.env import whale_home

    recipe = recipe or TinyRecipe()
    return (home or whale_home()) / "models" / f"tiny-{recipe.hash()}"


def install_tiny_model(
    home: Path | None = None,
    recipe: TinyRecipe | None = None,
    *,
    build: Callable[[Path], None] | None = None,
    from_scratch: bool = False,
) -> Path | None:
    """Find cached, or install, the tiny model for ``recipe`` under ``home/models/tiny-<hash>/``; return the dir.

    Where WHALE ships the recipe's model (the default recipe) it is verified and copied, unless ``from_scratch``;
    otherwise ``build(dir)`` writes it (`whale_core.models.tiny_build`), and without ``build`` nothing is written and
    the result is None. A cached model always wins: delete its directory to rebuild. The install or build writes to a
    temporary directory renamed into place; a file lock makes a concurrent second one wait for the first.
    Raises `whale_core.models.shipped.ShippedModelError` where the shipped copy is damaged.
    """
    from whale_core.models import shipped

    recipe = recipe or TinyRecipe()
    final = tiny_model_dir(home, recipe)
    if (final / "warmup_report.json").exists():
        return final
    source = None if from_scratch else shipped.shipped_dir(recipe.hash())
    if source is None and build is None:
        return None
    final.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(final.parent / f".{final.name}.lock"):
        if (final / "warmup_report.json").exists():  # built by someone else while we waited
            return final
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.tmp-", dir=final.parent))
        try:
            if source is not None:
                shipped.install(source, tmp)
            elif build is not None:
                build(tmp)
            tmp.chmod(0o755)  # mkdtemp makes it private; the cache is meant to be shared like any other dir
            if final.exists():  # a stale partial dir from an older, non-atomic writer: replace it
                shutil.rmtree(final)
            os.replace(tmp, final)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return final
