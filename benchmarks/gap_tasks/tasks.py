"""The harness-gap benchmark's tasks: generated here, deterministic, each with a hand-written reference harness.

Every task is a suite WHALE already runs — a built-in suite with options, or a JSONL file this module writes — plus
``<task>.yaml`` beside this file: the harness a person wrote by hand for SmolLM2-135M-Instruct after looking at a
few of its replies (the comment at the top of each file says what was changed and why). The generated problems are
this repository's own (no third-party data, same licence as the code):

- ``sequence``: "What number comes next? 34, 43, 52, 61, ?" (arithmetic sequences, start 1-99, step 2-15);
- ``unit``: "How many centimeters are in 7 meters?" (eight metric-style conversions by 10, 100 or 1000; 2-99 units);
- ``choice``: "Which number is the largest? A) 12 B) 45 C) 7 D) 30" (answered with the letter, matched exactly);
- ``letter``: "What is the first letter of the word garden?" (first or last letter of 267 common words, matched
  exactly);
- ``arith``: the built-in suite, 1-2 digit sums.

Tried and left out: the `sort` suite (3-5 items) scores 0.000 under its seed harness and 0.117 at best by hand (4
demos, "Numbers:/Sorted:" labels, 60 val problems): too little room to measure a fraction of it in; GSM8K has none
on a 135 M-parameter model.

``materialize(task, dir)`` writes a task's data (for the JSONL ones) and returns the WHALE config overrides that
select it (``suite.name``, ``suite.options`` / ``--data``).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
N_PROBLEMS = 600  # 360 train / 120 val / 120 test under the jsonl suite's 0.6/0.2/0.2 cut


@dataclass(frozen=True)
class Task:
    """One benchmark task: the suite a WHALE config names, its data file (JSONL tasks) and its reference harness."""

    name: str
    suite: str
    options: dict[str, Any] = field(default_factory=dict)
    data: Path | None = None

    @property
    def reference(self) -> Path:
        return HERE / f"{self.name}.yaml"

    def overrides(self) -> list[str]:
        """``--set`` overrides selecting this task (besides ``--data`` for a JSONL task)."""
        out = [f"suite.name={self.suite}"]
        out += [f"suite.options.{k}={json.dumps(v)}" for k, v in self.options.items()]
        return out


def _sequence(rng: random.Random) -> dict[str, str]:
    start, step = rng.randint(1, 99), rng.randint(2, 15)
    terms = [start + i * step for i in range(5)]
    return {"question": f"What number comes next? {', '.join(map(str, terms[:4]))}, ?", "answer": str(terms[4])}


_UNITS = (
    ("meters", "centimeters", 100),
    ("kilometers", "meters", 1000),
    ("kilograms", "grams", 1000),
    ("centimeters", "millimeters", 10),
    ("liters", "milliliters", 1000),
    ("dollars", "cents", 100),
    ("meters", "millimeters", 1000),
    ("tonnes", "kilograms", 1000),
)


def _unit(rng: random.Random) -> dict[str, str]:
    big, small, factor = rng.choice(_UNITS)
    n = rng.randint(2, 99)
    return {"question": f"How many {small} are in {n} {big}?", "answer": str(n * factor)}


def _choice(rng: random.Random) -> dict[str, str]:
    values = rng.sample(range(1, 100), 4)
    letters = "ABCD"
    options = " ".join(f"{letters[i]}) {v}" for i, v in enumerate(values))
    return {
        "question": f"Which number is the largest? {options}",
        "answer": letters[values.index(max(values))],
    }


_WORD_TEXT = """
apple banana cherry garden window yellow orange purple silver market planet
rocket pencil little number summer winter spring autumn dinner kitchen monkey rabbit turtle spider dragon castle
bridge forest island river valley desert ocean meadow basket bottle button candle carpet doctor engine family
finger flower friend future guitar hammer helmet jacket ladder lemon mirror needle pepper pillow pocket puzzle
ribbon saddle shadow sister soccer stairs sugar tiger tomato travel tunnel velvet wallet water wizard zebra
action animal answer anchor artist august author balloon banner barrel beacon beaver blanket blossom border
bottom bucket budget cabin camera canvas carbon cargo carrot cattle cement center chapter charcoal cheese
chicken circle citizen closet clover cobalt coffee collar copper corner cotton cousin cradle crayon crystal
cushion dancer danger daylight decade delta dentist diamond dolphin domino donkey drawer eagle effort elbow
empire energy fabric falcon farmer feather fiddle fossil fountain frozen galaxy garlic gentle giant ginger
glacier goblet gravel harbor harvest hazel heaven hockey honey horizon hunter iceberg insect jungle kernel
kettle kitten ladle lantern laptop lava leather legend lizard lobster locket magnet mango marble melon member
mitten moment mustard napkin nation nectar noodle nutmeg oyster paddle palace panther parrot pasta peanut pebble
pelican perfume piano picnic pigeon pirate plastic pottery powder prairie pretzel pumpkin quarter quilt radio
raven recipe riddle robot rooster salmon sandal scarf season second shelter shovel signal singer sketch slipper
soldier spinach sponge squirrel statue stomach storm stream studio sunset sweater switch tablet tailor teacher
temple thunder ticket timber toast tongue tractor trumpet tulip umbrella unicorn vacuum vessel village violin
volcano wagon walnut warrior weasel whisker willow wolf yogurt
"""
_WORDS = tuple(dict.fromkeys(_WORD_TEXT.split()))  # common words in a fixed order, each once


def _letter(rng: random.Random) -> dict[str, str]:
    word = rng.choice(_WORDS)
    which = rng.choice(("first", "last"))
    letter = word[0] if which == "first" else word[-1]
    return {"question": f"What is the {which} letter of the word {word}?", "answer": letter}


GENERATORS = {"sequence": _sequence, "unit": _unit, "choice": _choice, "letter": _letter}


def write_jsonl(name: str, path: Path, n: int | None = None, seed: int = 35) -> Path:
    """``n`` distinct problems of JSONL task ``name`` (deterministic for ``seed``) written to ``path``."""
    n = n or (2 * len(_WORDS) if name == "letter" else N_PROBLEMS)
    rng, seen, rows = random.Random(f"{name}:{seed}"), set(), []
    for _ in range(100 * n):
        row = GENERATORS[name](rng)
        if row["question"] not in seen:
            seen.add(row["question"])
            rows.append(row)
        if len(rows) == n:
            break
    if len(rows) < n:
        raise ValueError(f"task {name}: fewer than {n} distinct problems in {100 * n} draws")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def tasks(data_dir: Path) -> list[Task]:
    """The five tasks, the JSONL data written under ``data_dir``."""
    out = [Task(name, "jsonl", data=write_jsonl(name, data_dir / f"{name}.jsonl")) for name in GENERATORS]
    out.append(Task("arith", "arith", {"max_digits": 2}))
    return out
