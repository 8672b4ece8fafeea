"""The tiny model's warm-up data: the formats it is trained on (each a real `Harness` evolved from the suites' seed
harnesses, with its share of the examples) and the token sequences built from them. Why these formats and shares:
`whale_core.models.tiny`'s docstring (the recipe, with the measured figures).
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from whale_core.harness import Harness
from whale_core.suites.base import Problem

if TYPE_CHECKING:
    from whale_core.models.tiny import TinyRecipe
    from whale_core.suites.base import Suite

__all__ = ["CHAT_MESSAGES", "WarmupFormat", "examples", "load_arith_and_sort", "sequence", "warmup_formats"]


class WarmupFormat(BaseModel):
    """One warm-up format: a harness (its full text) and its share of the training examples."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    suite: str
    harness: str
    weight: float


def load_arith_and_sort() -> tuple[Suite, Suite]:
    """The two built-in suites the warm-up draws from."""
    from whale_core.suites import load_suite

    return load_suite("arith"), load_suite("sort")


CHAT_MESSAGES = [{"role": "system", "content": "{{ instruction }}"}, {"role": "user", "content": "{{ a }}+{{ b }}="}]


def warmup_formats(recipe: TinyRecipe, arith: Suite | None = None, sort: Suite | None = None) -> list[WarmupFormat]:
    """The documented warm-up formats, each a real harness text evolved from the suites' seed harnesses.

    Names: ``{plain|rev}-p{phrasing}-k{demos}`` (text mode, the seed template), ``{plain|rev}-p{i}-chat-k{demos}``
    (chat mode: instruction as system message, ``a+b=`` as user message), ``sort-k{demos}`` (the sort seed harness).
    """
    if arith is None or sort is None:
        arith, sort = load_arith_and_sort()
    seed_arith = Harness.from_text(arith.seed_harness)
    seed_sort = Harness.from_text(sort.seed_harness)
    out: list[WarmupFormat] = []
    arith_share = 1.0 - recipe.sort_share
    kinds = [("", recipe.text_k, 1.0 - recipe.chat_share), ("chat-", recipe.chat_k, recipe.chat_share)]
    for rev, phrasings in ((False, recipe.plain_phrasings), (True, recipe.reversed_phrasings)):
        enc_share = recipe.reversed_share if rev else 1.0 - recipe.reversed_share
        for pi, phrase in enumerate(phrasings):
            for mode, kw, mode_share in kinds:
                for k, wk in enumerate(kw):
                    if wk <= 0 or mode_share <= 0:
                        continue
                    name = f"{'rev' if rev else 'plain'}-p{pi}-{mode}k{k}"
                    h = seed_arith.evolve(name=name, instruction=phrase, fewshot={"k": k}, answer={"reverse": rev})
                    if mode:
                        h = h.evolve(messages=CHAT_MESSAGES)
                    w = arith_share * enc_share * mode_share * wk / (len(phrasings) * sum(kw))
                    out.append(WarmupFormat(name=name, suite="arith", harness=h.text, weight=w))
    for k, wk in enumerate(recipe.sort_k):
        if wk > 0 and recipe.sort_share > 0:
            h = seed_sort.evolve(name=f"sort-k{k}", fewshot={"k": k})
            w = recipe.sort_share * wk / sum(recipe.sort_k)
            out.append(WarmupFormat(name=f"sort-k{k}", suite="sort", harness=h.text, weight=w))
    total = sum(f.weight for f in out)
    return [f.model_copy(update={"weight": f.weight / total}) for f in out]


Sequence_ = tuple[list[int], list[int]]  # token ids, labels (-100 = no loss)


def sequence(h: Harness, problem: Problem, demos: Sequence[Problem], tok: Any) -> Sequence_:
    """Token ids of ``render(problem, demos) + answer + EOS`` and labels on every answer in it.

    The final answer is labelled with its EOS; the i-th demo's answer (with the token after it, the start of the
    separator, i.e. the stop) is labelled too, because the text before it is exactly ``render(demo_i, demos[:i])``:
    one sequence trains the harness at k = 0..len(demos) at once. A demo whose prefix does not line up (another
    tokenizer) is simply not labelled.
    """
    special = not h.is_chat
    full = h.render(problem, demos, tokenizer=tok)
    ids = tok(full, add_special_tokens=special).input_ids
    labels = [-100] * len(ids)
    for i, d in enumerate(demos):
        prefix = h.render(d, demos[:i], tokenizer=tok)
        target = h.encode_answer(d.answer)
        if not full.startswith(prefix + target):
            continue
        a = len(tok(prefix, add_special_tokens=special).input_ids)
        b = len(tok(prefix + target, add_special_tokens=special).input_ids)
        if ids[:b] == tok(prefix + target, add_special_tokens=special).input_ids and b < len(ids):
            labels[a : b + 1] = ids[a : b + 1]
    answer = [*tok(h.encode_answer(problem.answer), add_special_tokens=False).input_ids, tok.eos_token_id]
    return ids + answer, labels + answer


def examples(
    recipe: TinyRecipe,
    formats: Sequence[WarmupFormat],
    harnesses: Sequence[Harness],
    suites: dict[str, Suite],
    tok: Any,
    rng: random.Random,
    n: int,
    exclude: frozenset[str] = frozenset(),
) -> list[Sequence_]:
    """``n`` training sequences: a format drawn by weight, a problem and demos drawn for it, rendered by its harness.

    Arith problems are drawn fresh per digit band (``digit_weights``), never one in ``exclude`` (the suite's val
    and test problems and the build's evaluation problems, from the builder in `whale_core.models.tiny_build`): the
    3000-problem train split is far too small for ~150k training answers (measured: a model trained on it
    memorizes it and stays near 0 on held-out 2–3-digit sums). Sort problems come from the sort train split.
    Demos: ``select_demos`` over a pool drawn the same way.
    """
    weights = [f.weight for f in formats]
    sort_train = suites["sort"].problems("train")
    bands = list(recipe.digit_weights)
    band_w = [recipe.digit_weights[d] for d in bands]

    def draw(suite: str) -> Problem:
        if suite != "arith":
            return rng.choice(sort_train)
        digits = rng.choices(bands, weights=band_w)[0]
        lo, hi = (0, 9) if digits == 1 else (10 ** (digits - 1), 10**digits - 1)
        while True:
            a, b = rng.randint(lo, hi), rng.randint(lo, hi)
            if f"arith:{a}+{b}" not in exclude:
                return Problem(f"arith:{a}+{b}", {"a": str(a), "b": str(b)}, str(a + b), {"digits": digits})

    out: list[Sequence_] = []
    for fi in rng.choices(range(len(formats)), weights=weights, k=n):
        fmt, h = formats[fi], harnesses[fi]
        problem = draw(fmt.suite)
        pool = [draw(fmt.suite) for _ in range(h.spec.fewshot.k + 1)]
        demos = h.select_demos(problem, pool, rng.randrange(1 << 30))
        out.append(sequence(h, problem, demos, tok))
    return out
