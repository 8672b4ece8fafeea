"""The harness text format (v1): schema, validation with field-precise errors, canonical text and its hash.

A harness text is YAML. `load_spec` parses it (safe loader; anchors/aliases and duplicate keys refused; at most
`MAX_TEXT_BYTES`), validates it against `HarnessSpec` (strict types: ``k: "2"`` or ``reverse: 1`` are errors),
then runs the semantic checks pydantic cannot express: exactly one of ``template``/``messages``, the sandbox check
of every template, message roles, and the safety check of every regex. Every failure is a `HarnessError` naming
the field.

The canonical text (`canonical_text`) is YAML with a fixed key order (the order of the fields below), every
default filled in, no-op parse steps (``reverse: false``) dropped, multi-line strings as literal blocks, and no
comments, so formatting-only edits do not change the sha256 and semantic edits do. The optional top-level
``parent:`` key is metadata: it is taken out before validation and never enters the canonical text.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, field_validator, model_validator

from whale_core.harness.errors import HarnessError
from whale_core.harness.parse import STEP_OPS, Step
from whale_core.harness.regexes import MAX_PATTERN_CHARS, check_pattern
from whale_core.harness.render import check_template

VERSION = 1
MAX_TEXT_BYTES = 16 * 1024
MAX_INSTRUCTION_CHARS = 2000
MAX_TEMPLATE_CHARS = 4000
MAX_PARSE_STEPS = 32
MAX_PREFIX_CHARS = 200
MAX_MESSAGES = 16
_SHA_RE = re.compile(r"^[0-9a-f]{64}$")

_CFG = ConfigDict(extra="forbid", strict=True, frozen=True)

StopString = Annotated[str, StringConstraints(min_length=1, max_length=16)]


class FewShot(BaseModel):
    """Few-shot demos, drawn from the train split: ``k`` of them, ``random`` (seeded), the ``first`` k, or the k
    ``similar`` ones (closest surface shape of the problem fields: digits and letters as classes, then length)."""

    model_config = _CFG
    k: int = Field(default=0, ge=0, le=16)
    select: Literal["random", "first", "similar"] = "random"
    separator: str = Field(default="\n", max_length=16)


class AnswerFormat(BaseModel):
    """How answers are written (in demos, and by the model); `Harness.parse_answer` undoes it."""

    model_config = _CFG
    reverse: bool = False
    pad: int = Field(default=0, ge=0, le=32)
    sep: str = Field(default="", max_length=3)

    @field_validator("sep")
    @classmethod
    def _sep_chars(cls, v: str) -> str:
        if any(c.isalnum() or c == "-" for c in v):
            raise ValueError("must not contain letters, digits or '-' (they would be ambiguous with the answer)")
        return v


class ParseStep(BaseModel):
    """One parse step: a one-key mapping such as ``{regex: '...'}`` or ``{strip: true}``."""

    model_config = _CFG
    regex: str | None = Field(default=None, min_length=1, max_length=MAX_PATTERN_CHARS)
    strip: bool | Annotated[str, StringConstraints(min_length=1, max_length=16)] | None = None
    remove: str | None = Field(default=None, min_length=1, max_length=16)
    reverse: bool | None = None
    lower: bool | None = None
    upper: bool | None = None
    first_line: bool | None = None
    last_line: bool | None = None
    int_: bool | None = Field(default=None, alias="int")
    number: Literal["first", "last", "new"] | None = None
    after: Annotated[str, StringConstraints(min_length=1, max_length=32)] | None = None

    @model_validator(mode="after")
    def _one_key(self) -> ParseStep:
        keys = [op for op in STEP_OPS if getattr(self, "int_" if op == "int" else op) is not None]
        if len(keys) != 1:
            raise ValueError(f"a parse step is a one-key mapping such as {{regex: '...'}}; got {len(keys)} keys")
        return self

    @property
    def step(self) -> Step:
        """(op, argument) of this step."""
        for op in STEP_OPS:
            value = getattr(self, "int_" if op == "int" else op)
            if value is not None:
                return op, value
        raise AssertionError("unreachable: validated to have one key")


class Decoding(BaseModel):
    """Generation settings: temperature 0 means greedy."""

    model_config = _CFG
    temperature: float = Field(default=0.0, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    max_new_tokens: int = Field(default=32, ge=1, le=512)
    stop: list[StopString] = Field(default_factory=list, max_length=4)


class Inference(BaseModel):
    """Inference policy at evaluation: ``samples`` completions per problem, combined by ``aggregate``."""

    model_config = _CFG
    samples: int = Field(default=1, ge=1, le=32)
    aggregate: Literal["majority", "first"] = "majority"


class Message(BaseModel):
    """One chat message template; ``content`` is a sandboxed Jinja2 template."""

    model_config = _CFG
    role: Literal["system", "user", "assistant"]
    content: str = Field(max_length=MAX_TEMPLATE_CHARS)


class HarnessSpec(BaseModel):
    """The validated harness (v1). Field order here is the key order of the canonical text. Do not mutate."""

    model_config = _CFG
    whale_harness: int
    name: str = Field(default="unnamed", min_length=1, max_length=80, pattern=r"^[A-Za-z0-9._-]+$")
    instruction: str = Field(default="", max_length=MAX_INSTRUCTION_CHARS)
    template: str | None = Field(default=None, max_length=MAX_TEMPLATE_CHARS)
    messages: list[Message] | None = Field(default=None, min_length=1, max_length=MAX_MESSAGES)
    prefix: str = Field(default="", max_length=MAX_PREFIX_CHARS)
    fewshot: FewShot = FewShot()
    answer: AnswerFormat = AnswerFormat()
    parse: list[ParseStep] = Field(default_factory=list, max_length=MAX_PARSE_STEPS)
    decoding: Decoding = Decoding()
    inference: Inference = Inference()

    @field_validator("whale_harness")
    @classmethod
    def _version(cls, v: int) -> int:
        if v != VERSION:
            raise ValueError(f"unsupported harness version {v} (this WHALE reads whale_harness: {VERSION})")
        return v


# ------------------------------------------------------------------------------------------------------- loading


_BaseLoader: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml parses ~10x faster; same data


class _Loader(_BaseLoader):  # type: ignore[misc,valid-type]
    """Safe loader that refuses duplicate keys (a silent last-wins is almost always a mistake)."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)  # type: ignore[no-untyped-call]
            try:
                if key in seen:
                    raise HarnessError(str(key), f"duplicate key {key!r} (line {key_node.start_mark.line + 1})")
                seen.add(key)
            except TypeError:  # an unhashable key: the schema rejects it later
                pass
        return dict(super().construct_mapping(node, deep=deep))


def load_document(text: str) -> tuple[dict[str, Any], str | None]:
    """YAML text -> (mapping without ``parent``, parent sha or None). Raises `HarnessError`."""
    if not isinstance(text, str):
        raise HarnessError("", f"harness text must be a string (got {type(text).__name__})")
    size = len(text.encode("utf-8"))
    if size > MAX_TEXT_BYTES:
        raise HarnessError("", f"text too large: {size} bytes (max {MAX_TEXT_BYTES})")
    try:
        for event in yaml.parse(text, Loader=_BaseLoader):
            if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None):
                raise HarnessError("", "YAML anchors and aliases (&x, *x) are not allowed")
        data = yaml.load(text, Loader=_Loader)  # _Loader is a SafeLoader
    except yaml.YAMLError as e:
        raise HarnessError("", f"invalid YAML: {' '.join(str(e).split())}") from None  # one line
    if not isinstance(data, dict):
        raise HarnessError("", f"the harness must be a YAML mapping (got {type(data).__name__})")
    data = dict(data)
    parent = data.pop("parent", None)
    if parent is not None and not (isinstance(parent, str) and _SHA_RE.match(parent)):
        raise HarnessError("parent", f"must be a 64-hex-digit sha256 or null (got {_short(parent)})")
    return data, parent


def _short(value: Any) -> str:
    r = repr(value)
    return r if len(r) <= 60 else r[:57] + "..."


_MODELS_BY_PATH: dict[tuple[str, ...], type[BaseModel]] = {
    (): HarnessSpec,
    ("fewshot",): FewShot,
    ("answer",): AnswerFormat,
    ("parse",): ParseStep,
    ("decoding",): Decoding,
    ("inference",): Inference,
    ("messages",): Message,
}


def _dotted(loc: tuple[int | str, ...]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + str(part)
    return out


def _valid_keys(model: type[BaseModel]) -> str:
    return ", ".join(f.alias or name for name, f in model.model_fields.items())


def _to_harness_error(err: ValidationError) -> HarnessError:
    e = err.errors(include_url=False)[0]
    loc = tuple(p for p in e["loc"] if not (isinstance(p, str) and p.startswith("function-")))
    kind, ctx, value = e["type"], e.get("ctx", {}), e.get("input")
    if kind == "extra_forbidden":
        parent_model = _MODELS_BY_PATH.get(tuple(p for p in loc[:-1] if isinstance(p, str)), HarnessSpec)
        return HarnessError(_dotted(loc), f"unknown key {loc[-1]!r}; valid keys: {_valid_keys(parent_model)}")
    if "strip" in loc:  # a union (bool | str): pydantic reports one error per member; say it once
        loc = loc[: loc.index("strip") + 1]
        return HarnessError(_dotted(loc), f"must be true/false or a string of 1-16 characters (got {_short(value)})")
    field = _dotted(loc)
    if kind == "missing":
        hint = f" (write 'whale_harness: {VERSION}' first)" if field == "whale_harness" else ""
        return HarnessError(field, f"required{hint}")
    bounds = {"less_than_equal": "<=", "less_than": "<", "greater_than_equal": ">=", "greater_than": ">"}
    if kind in bounds:
        limit = next(iter(ctx.values()))
        return HarnessError(field, f"must be {bounds[kind]} {limit} (got {_short(value)})")
    if kind == "string_too_long":
        return HarnessError(field, f"too long: {len(value)} chars (max {ctx.get('max_length')})")
    if kind == "string_too_short":
        return HarnessError(field, f"too short: {len(value)} chars (min {ctx.get('min_length')})")
    if kind == "too_long":
        return HarnessError(field, f"too many items: {ctx.get('actual_length')} (max {ctx.get('max_length')})")
    if kind == "too_short":
        return HarnessError(field, f"too few items: {ctx.get('actual_length')} (min {ctx.get('min_length')})")
    if kind == "string_pattern_mismatch":
        return HarnessError(field, f"must match {ctx.get('pattern')} (got {_short(value)})")
    if kind == "value_error":
        return HarnessError(field, str(ctx.get("error", e["msg"])))
    msg = e["msg"][0].lower() + e["msg"][1:]
    return HarnessError(field, f"{msg} (got {type(value).__name__} {_short(value)})")


def validate_spec(data: Mapping[str, Any]) -> HarnessSpec:
    """Schema + semantic validation of a loaded mapping. Raises `HarnessError` naming the field."""
    try:
        spec = HarnessSpec.model_validate(dict(data))
    except ValidationError as err:
        raise _to_harness_error(err) from None
    if (spec.template is None) == (spec.messages is None):
        which = "both are given" if spec.template is not None else "neither is given"
        raise HarnessError("template", f"exactly one of 'template' or 'messages' is required ({which})")
    if spec.template is not None:
        check_template(spec.template, "template")
    if spec.messages is not None:
        roles = [m.role for m in spec.messages]
        if "user" not in roles or not (roles[-1] == "user" or roles[-2:] == ["user", "assistant"]):
            raise HarnessError(  # a final assistant message is a reply prefix (whale_core.harness.chat)
                "messages", "the last message must have role 'user', or be an assistant reply prefix after a user one"
            )
        first_other = next((i for i, r in enumerate(roles) if r != "system"), len(roles))
        if "system" in roles[first_other:]:
            raise HarnessError("messages", "system messages may only come first")
        for i, m in enumerate(spec.messages):
            check_template(m.content, f"messages[{i}].content")
    for i, step in enumerate(spec.parse):
        op, arg = step.step
        if op == "regex":
            problem = check_pattern(str(arg))
            if problem:
                raise HarnessError(f"parse[{i}].regex", problem)
    return spec


# ----------------------------------------------------------------------------------------------------- canonical


def canonical_data(spec: HarnessSpec) -> dict[str, Any]:
    """The spec as plain data in canonical key order, defaults filled, no-op parse steps dropped."""
    data: dict[str, Any] = {"whale_harness": spec.whale_harness, "name": spec.name, "instruction": spec.instruction}
    if spec.template is not None:
        data["template"] = spec.template
    else:
        data["messages"] = [{"role": m.role, "content": m.content} for m in spec.messages or []]
    if spec.prefix:  # only when set: a harness without one keeps the text (and sha) it had before the field existed
        data["prefix"] = spec.prefix
    data["fewshot"] = spec.fewshot.model_dump()
    data["answer"] = spec.answer.model_dump()
    data["parse"] = [{op: arg} for op, arg in (s.step for s in spec.parse) if arg is not False]
    data["decoding"] = spec.decoding.model_dump()
    data["inference"] = spec.inference.model_dump()
    return data


class _Dumper(yaml.SafeDumper):
    """The pure-Python emitter, on purpose: the canonical text must not depend on whether libyaml is installed."""


class _QuotedDumper(yaml.SafeDumper):
    """Fallback emitter: every string double-quoted (escapes everything; always loads back exactly)."""


_ODD_BREAKS = ("\r", "\x85", "\u2028", "\u2029")  # line breaks to YAML that PyYAML may emit raw in plain/block style


def _str_presenter(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    # Multi-line text reads best as a literal block; whitespace-only text (a "\n" separator) reads best quoted.
    if any(b in value for b in _ODD_BREAKS):
        style: str | None = '"'
    elif "\n" in value:
        style = "|" if value.strip() else '"'
    else:
        style = None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


def _quoted_presenter(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style='"')


_Dumper.add_representer(str, _str_presenter)
_QuotedDumper.add_representer(str, _quoted_presenter)


def dump_yaml(data: Mapping[str, Any]) -> str:
    """Deterministic YAML (keys in the given order, block style, no line folding), checked to load back equal.

    Readable style first; if PyYAML's emitter cannot round-trip some string that way, every string is
    double-quoted instead (still a deterministic function of the data)."""
    for dumper in (_Dumper, _QuotedDumper):
        text = yaml.dump(
            dict(data), Dumper=dumper, sort_keys=False, allow_unicode=True, default_flow_style=False, width=1 << 16
        )
        try:
            if yaml.load(text, Loader=_BaseLoader) == data:
                return text
        except yaml.YAMLError:
            pass
    raise HarnessError("", "the harness contains characters that cannot be written back as YAML")


def canonical_text(spec: HarnessSpec) -> str:
    """The text that is stored and hashed."""
    return dump_yaml(canonical_data(spec))


def sha256_text(text: str) -> str:
    """sha256 hex of the UTF-8 text."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
