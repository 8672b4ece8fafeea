"""The `jsonl` suite: the user's own problems, one JSON object per line.

Each line gives the question fields (default: every key of the first line except the answer field) and the answer
field (default ``answer``). GSM8K-style answers ending in ``#### 42`` are reduced to the part after the last
``####``. Blank lines are skipped; a problem whose question fields repeat an earlier line's is dropped (first kept),
so that splits stay disjoint.

Splits: the problems are shuffled with ``random.Random(f"jsonl:{seed}")`` and cut by ``fractions`` (relative
weights, default 0.6/0.2/0.2). With n >= 3 problems every split gets at least one: val and test get
``max(1, round(n * fraction))`` each, shrunk (larger first) until train keeps at least one; fewer than 3 problems is
an error. ``sizes`` (when given) only caps each split after the cut, so the assignment does not depend on it.
Problem ids are ``line-<n>`` (1-based line number in the file): stable while the file is not edited above a line.

Matching (``match``): ``exact`` compares after trimming and collapsing whitespace; ``numeric`` compares as decimal
numbers, ignoring commas, ``$``, ``%``, spaces and a trailing ``.``, so ``$1,000.0`` equals ``1000``; ``auto``
(default) is ``numeric`` when every gold answer is a number, else ``exact``. Scores are 1 or 0.
"""

from __future__ import annotations

import json
import keyword
import math
import random
import re
from collections.abc import Mapping, Sequence
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field

from whale_core.suites.arith import load_seed
from whale_core.suites.base import SPLITS, Problem, Split
from whale_core.suites.registry import SuiteError, parse_options
from whale_core.user_files import read_user_file

MAX_DATA_BYTES = 256 << 20  # a data file WHALE holds in memory whole: 256 MiB (GSM8K's train split is ~4 MB)
_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def to_number(text: str | None) -> Decimal | None:
    """The decimal value of ``text`` ignoring commas, ``$``, ``%``, spaces and a trailing ``.``; else ``None``."""
    if text is None:
        return None
    t = re.sub(r"[\s,$%]", "", str(text)).rstrip(".")
    if not _NUMBER.fullmatch(t):
        return None
    try:
        return Decimal(t)
    except InvalidOperation:
        return None


def _squash(text: str) -> str:
    return " ".join(text.split())


class SplitFractions(BaseModel):
    """Relative share of each split (normalized to sum 1)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    train: float = Field(default=0.6, gt=0)
    val: float = Field(default=0.2, gt=0)
    test: float = Field(default=0.2, gt=0)


class JsonlOptions(BaseModel):
    """Options of the `jsonl` suite."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    question_fields: list[str] | None = Field(default=None, min_length=1)
    answer_field: str = "answer"
    match: Literal["exact", "numeric", "auto"] = "auto"
    fractions: SplitFractions = SplitFractions()


def split_counts(n: int, fractions: SplitFractions) -> dict[Split, int]:
    """How many of ``n`` problems go to each split; every split gets at least one (needs n >= 3)."""
    if n < 3:
        raise SuiteError(f"{n} distinct problem(s); the jsonl suite needs at least 3 (one per split)")
    total = fractions.train + fractions.val + fractions.test
    counts = {s: max(1, math.floor(n * getattr(fractions, s) / total + 0.5)) for s in ("val", "test")}
    while n - counts["val"] - counts["test"] < 1:
        larger = "val" if counts["val"] >= counts["test"] else "test"
        counts[larger] -= 1
    return {"train": n - counts["val"] - counts["test"], "val": counts["val"], "test": counts["test"]}


class JsonlSuite:
    """Problems read from a JSONL file. See the module docstring."""

    def __init__(self, path: str | Path, seed: int = 0, sizes: Mapping[str, int] | None = None, **options: Any) -> None:
        self.path = Path(path)
        self.seed = seed
        self.name = f"jsonl:{self.path.stem}"
        self.options = parse_options(JsonlOptions, options, "jsonl")
        self.sizes = dict(sizes) if sizes is not None else None
        problems, self.question_fields, reduced = self._read()
        gold_numeric = all(to_number(p.answer) is not None for p in problems)
        self.match: Literal["exact", "numeric"] = (
            ("numeric" if gold_numeric else "exact") if self.options.match == "auto" else self.options.match
        )
        self._splits = self._cut(problems)
        self.description = self._describe(len(problems), reduced)
        self.seed_harness = self._seed()

    def problems(self, split: Split) -> Sequence[Problem]:
        if split not in SPLITS:
            raise SuiteError(f"unknown split {split!r}; expected one of {', '.join(SPLITS)}")
        return self._splits[split]

    def score(self, answer: str | None, problem: Problem) -> float:
        if answer is None:
            return 0.0
        if self.match == "numeric":
            got, gold = to_number(answer), to_number(problem.answer)
            return 1.0 if got is not None and got == gold else 0.0
        return 1.0 if _squash(str(answer)) == _squash(problem.answer) else 0.0

    def _read(self) -> tuple[list[Problem], list[str], bool]:
        """Parse the file: problems (deduplicated by question fields), the question fields, whether any `####`."""
        where = str(self.path)
        raw = read_user_file(self.path, "jsonl suite: data file", MAX_DATA_BYTES, SuiteError)
        try:
            lines = raw.decode("utf-8").splitlines()
        except UnicodeDecodeError as exc:
            lineno = raw.count(b"\n", 0, exc.start) + 1
            bad = f"byte 0x{raw[exc.start : exc.start + 1].hex()} at offset {exc.start}"
            raise SuiteError(f"{where}:{lineno}: not valid UTF-8 ({bad})") from None
        afield = self.options.answer_field
        qfields = self.options.question_fields
        problems: list[Problem] = []
        seen: set[str] = set()
        reduced = False
        for lineno, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise SuiteError(f"{where}:{lineno}: not valid JSON ({exc.msg} at column {exc.colno})") from None
            if not isinstance(row, dict):
                raise SuiteError(f"{where}:{lineno}: expected a JSON object, got {type(row).__name__}")
            try:
                json.dumps(row, ensure_ascii=False).encode("utf-8")
            except UnicodeEncodeError as exc:  # a "\udc80" escape: a lone surrogate, not text
                bad = json.dumps(exc.object[exc.start : exc.end])
                raise SuiteError(f"{where}:{lineno}: a string holds a lone surrogate ({bad}), not text") from None
            if qfields is None:
                qfields = [k for k in row if k != afield]
                if not qfields:
                    raise SuiteError(f"{where}:{lineno}: no question fields (only {afield!r})")
            missing = [k for k in [*qfields, afield] if k not in row]
            if missing:
                raise SuiteError(f"{where}:{lineno}: missing field(s) {missing}; the line has {sorted(row)}")
            gold = row[afield]
            if isinstance(gold, bool) or not isinstance(gold, str | int | float):
                raise SuiteError(f"{where}:{lineno}: field {afield!r} must be a string or a number")
            answer = str(gold)
            if "####" in answer:
                answer, reduced = answer.rsplit("####", 1)[1].strip(), True
            if not answer.strip():
                raise SuiteError(f"{where}:{lineno}: empty answer in field {afield!r}")
            fields = {k: row[k] for k in qfields}
            key = json.dumps(fields, sort_keys=True)
            if key in seen:
                continue
            seen.add(key)
            problems.append(Problem(id=f"line-{lineno}", fields=fields, answer=answer, meta={"line": lineno}))
        if qfields is None:
            raise SuiteError(f"jsonl suite: {where} has no problems")
        try:
            split_counts(len(problems), self.options.fractions)
        except SuiteError as exc:
            raise SuiteError(f"jsonl suite: {where}: {exc}") from None
        return problems, qfields, reduced

    def _cut(self, problems: list[Problem]) -> dict[Split, tuple[Problem, ...]]:
        order = list(problems)
        random.Random(f"jsonl:{self.seed}").shuffle(order)
        counts = split_counts(len(order), self.options.fractions)
        out: dict[Split, tuple[Problem, ...]] = {}
        start = 0
        for split in SPLITS:
            chunk = order[start : start + counts[split]]
            start += counts[split]
            if self.sizes is not None:
                chunk = chunk[: self.sizes[split]]
            out[split] = tuple(chunk)
        return out

    def _describe(self, n: int, reduced: bool) -> str:
        fields = ", ".join(f"`{k}`" for k in self.question_fields)
        afield = self.options.answer_field
        text = f"Problems from the user's data file '{self.path.name}' ({n} problems). Each gives {fields} "
        text += f"and asks for its `{afield}`"
        text += " (the reference is the final answer only, the text after '####' in the file)." if reduced else "."
        if self.match == "numeric":
            text += (
                " An answer is correct when it equals the reference as a number (commas, '$', '%' and a trailing "
                "'.0' are ignored); anything else, including an unparsable answer, scores 0."
            )
        else:
            text += " An answer is correct only when it equals the reference text exactly (up to whitespace)."
        return text

    def _seed(self) -> str:
        data = yaml.safe_load(load_seed("jsonl"))
        bad = [
            k
            for k in self.question_fields
            if not _IDENT.fullmatch(k) or keyword.iskeyword(k) or k.lower() in ("true", "false", "none", "instruction")
        ]
        if bad:
            raise SuiteError(
                f"jsonl suite: question field(s) {bad} are not usable in a template (letters, digits and '_' only; "
                "not a keyword or 'instruction'); choose others with the question_fields option"
            )
        if len(self.question_fields) == 1:
            body = "Question: {{ " + self.question_fields[0] + " }}"
        else:
            body = "\n".join(f"{k}: {{{{ {k} }}}}" for k in self.question_fields)
        data["template"] = "{{ instruction }}\n" + body + "\nAnswer:"
        if self.match == "exact":
            data["parse"] = [{"first_line": True}, {"strip": True}]
        return yaml.safe_dump(data, sort_keys=False, allow_unicode=True)
