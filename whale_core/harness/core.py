"""`Harness`: a validated, immutable harness with its canonical text, sha256 identity and parent pointer.

Identity is the sha256 of the canonical text (see `spec`), so equality and hashing go by ``sha`` only; ``parent``
is metadata. A `Harness` pickles as (canonical text, sha, parent) and is rebuilt from that, so it travels cheaply
through Prefect tasks and process pools. Everything a harness does is data-driven: rendering runs in the Jinja2
sandbox (`render`), parsing runs the safe pipeline (`parse`).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from whale_core.harness import chat as _chat
from whale_core.harness import parse as _parse
from whale_core.harness import render as _render
from whale_core.harness.errors import HarnessError, RenderError
from whale_core.harness.spec import (
    MAX_TEXT_BYTES,
    HarnessSpec,
    canonical_data,
    canonical_text,
    dump_yaml,
    load_document,
    sha256_text,
    validate_spec,
)
from whale_core.suites.base import Problem
from whale_core.user_files import read_user_file


class Harness:
    """A validated harness. Build with `from_text` / `from_file` / `evolve`; never mutate ``spec``."""

    __slots__ = ("_parent", "_sha", "_spec", "_text")

    def __init__(self, spec: HarnessSpec, text: str, sha: str, parent: str | None) -> None:
        # Internal: callers use from_text(); this trusts that text == canonical_text(spec) and sha == sha256(text).
        self._spec = spec
        self._text = text
        self._sha = sha
        self._parent = parent

    # ------------------------------------------------------------------------------------------ construction

    @classmethod
    def from_text(cls, yaml_text: str, parent: str | None = None) -> Harness:
        """Parse + validate + canonicalize. ``parent`` (if given) overrides a ``parent:`` key in the text."""
        if isinstance(yaml_text, str):
            try:
                yaml_text.encode("utf-8")
            except UnicodeEncodeError as e:  # a lone surrogate, e.g. from a JSON "\\udc80" escape in an API reply
                where = f"character {e.start} ({yaml_text[e.start]!r})"
                raise HarnessError("", f"text is not valid Unicode: a lone surrogate at {where}") from None
        data, parent_in_text = load_document(yaml_text)
        spec = validate_spec(data)
        return cls._from_spec(spec, parent if parent is not None else parent_in_text)

    @classmethod
    def from_file(cls, path: str | Path, parent: str | None = None) -> Harness:
        """`from_text` on a file's contents (read at most 16 KiB + 1 byte, so a huge file fails fast). A file that
        cannot be read, is too large or is not UTF-8 is a `HarnessError` naming the file."""
        raw = read_user_file(path, "harness file", MAX_TEXT_BYTES, lambda msg: HarnessError("", msg))
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            bad = f"byte 0x{raw[e.start : e.start + 1].hex()} at offset {e.start}"
            raise HarnessError("", f"file {str(path)!r} is not valid UTF-8 ({bad})") from None
        try:
            return cls.from_text(text, parent=parent)
        except HarnessError as e:
            raise type(e)(e.field, f"{e.problem} (in {str(path)!r})") from None

    @classmethod
    def _from_spec(cls, spec: HarnessSpec, parent: str | None) -> Harness:
        data = canonical_data(spec)
        text = dump_yaml(data)
        try:
            size = len(text.encode("utf-8"))
        except UnicodeEncodeError as e:  # evolve() with a lone surrogate in a value
            where = f"character {e.start} ({text[e.start]!r})"
            raise HarnessError("", f"text is not valid Unicode: a lone surrogate at {where}") from None
        if size > MAX_TEXT_BYTES:
            raise HarnessError("", f"canonical text too large: {size} bytes (max {MAX_TEXT_BYTES})")
        canonical_spec = HarnessSpec.model_validate(data)  # drops no-op steps so spec and text agree
        return cls(canonical_spec, text, sha256_text(text), parent)

    def evolve(self, **changes: Any) -> Harness:
        """A new harness with top-level fields replaced (nested mappings merged, lists replaced, ``None`` restores
        the default), validated, with ``parent = self.sha``. Setting ``messages`` drops ``template`` and vice
        versa. Example: ``h.evolve(fewshot={"k": 4}, answer={"reverse": True})``."""
        data = canonical_data(self._spec)
        for key, value in changes.items():
            value = _plain(value)
            if key in ("template", "messages") and value is not None:
                data.pop("messages" if key == "template" else "template", None)
            if value is None:
                data.pop(key, None)
            elif isinstance(value, Mapping) and isinstance(data.get(key), dict):
                data[key] = _merge(data[key], value)
            else:
                data[key] = value
        spec = validate_spec(data)
        return Harness._from_spec(spec, self._sha)

    # --------------------------------------------------------------------------------------------- identity

    @property
    def spec(self) -> HarnessSpec:
        return self._spec

    @property
    def text(self) -> str:
        """Canonical YAML text: what is stored and hashed (no ``parent`` key)."""
        return self._text

    @property
    def sha(self) -> str:
        return self._sha

    @property
    def parent(self) -> str | None:
        return self._parent

    @property
    def name(self) -> str:
        return self._spec.name

    @property
    def is_chat(self) -> bool:
        return self._spec.messages is not None

    def document(self) -> str:
        """The canonical text with a leading ``parent:`` line when there is a parent (what to write to a file);
        `from_text` on it gives back this harness, parent included."""
        return (f"parent: {self._parent}\n" if self._parent else "") + self._text

    def diff(self, other: Harness) -> str:
        """Unified diff of the canonical texts (self -> other)."""
        return "".join(
            difflib.unified_diff(
                self._text.splitlines(keepends=True),
                other._text.splitlines(keepends=True),
                fromfile=f"{self.name}@{self._sha[:10]}",
                tofile=f"{other.name}@{other._sha[:10]}",
            )
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Harness) and other._sha == self._sha

    def __hash__(self) -> int:
        return hash(self._sha)

    def __repr__(self) -> str:
        parent = self._parent[:10] if self._parent else None
        return f"Harness(name={self.name!r}, sha={self._sha[:10]!r}, parent={parent!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (_restore, (self._text, self._sha, self._parent))

    # ------------------------------------------------------------------------------------------------- use

    def select_demos(self, problem: Problem, pool: Sequence[Problem], seed: int) -> list[Problem]:
        """``fewshot.k`` demos from ``pool`` (the train split), never ``problem`` (by id); deterministic."""
        fs = self._spec.fewshot
        return _render.select_demos(problem, pool, fs.k, fs.select, seed)

    def render(self, problem: Problem, demos: Sequence[Problem], tokenizer: Any = None) -> str:
        """The full model input. Text mode: demos (template + encoded answer) joined by ``fewshot.separator``, then
        the separator, then the problem. Chat mode: messages with demo pairs, through the tokenizer's
        ``apply_chat_template(..., add_generation_prompt=True)``. Either way ``prefix`` follows, literally: the text the
        model continues from ("The answer is"). Raises `RenderError` for this problem."""
        s = self._spec
        if s.messages is None:
            assert s.template is not None
            text = _render.render_text_prompt(
                s.template, s.instruction, s.fewshot.separator, problem, demos, self.encode_answer
            )
            return text + s.prefix
        if tokenizer is None:
            raise RenderError("messages", "this harness is in chat mode (messages): render() needs a tokenizer")
        msgs = _chat.chat_messages(
            [(m.role, m.content) for m in s.messages], s.instruction, problem, demos, self.encode_answer
        )
        return _chat.apply_template(tokenizer, msgs) + s.prefix

    def encode_answer(self, gold: str) -> str:
        """The answer as written in demos (sign in front, then pad / reverse / sep)."""
        a = self._spec.answer
        return _parse.encode_answer(gold, a.reverse, a.pad, a.sep)

    def parse_answer(self, completion: str, problem: Problem | None = None) -> str:
        """Cut at the first stop string, run the parse pipeline, undo the encoding. Raises `AnswerParseError`.
        ``problem``: the problem the completion answers; its fields' numbers are what ``number: new`` skips (without
        it, nothing counts as echoed). Its answer is never read."""
        s = self._spec
        steps = [p.step for p in s.parse]
        a = s.answer
        echoed = _parse.echoed_numbers(problem.fields.values()) if problem is not None else frozenset()
        return _parse.parse_completion(completion, steps, s.decoding.stop, a.reverse, a.pad, a.sep, echoed=echoed)


def _plain(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(by_alias=True)
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value


def _merge(base: Mapping[str, Any], update: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in update.items():
        if v is None:
            out.pop(k, None)
        elif isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = _merge(out[k], v)
        else:
            out[k] = v
    return out


def _restore(text: str, sha: str, parent: str | None) -> Harness:
    """Unpickle: rebuild from the canonical text (schema-validated; the sha must match)."""
    data, _ = load_document(text)
    spec = HarnessSpec.model_validate(data)
    if sha256_text(text) != sha or canonical_text(spec) != text:
        return Harness.from_text(text, parent=parent)
    return Harness(spec, text, sha, parent)
