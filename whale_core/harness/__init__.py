"""The harness: the versioned text around the model (template, few-shot, answer encoding, parse, decoding).

Public API::

    h = Harness.from_text(yaml_text, parent=None)   # HarnessError(field=..., problem=...) when invalid
    h.spec / h.text / h.sha / h.parent / h.name
    h.evolve(**changes) / h.diff(other)
    h.select_demos(problem, pool, seed) / h.render(problem, demos, tokenizer=None)
    h.encode_answer(gold) / h.parse_answer(completion)  # AnswerParseError when no answer is found

Modules: `errors`, `spec` (schema, canonical text, hash), `render` (sandboxed Jinja2, few-shot), `bounds` (the
render-time limits: steps, work, value sizes, time), `parse` (answer
encoding, parse pipeline), `regexes` (time-limited regexes and the catastrophic-pattern check), `core` (`Harness`).
"""

from whale_core.harness.core import Harness
from whale_core.harness.errors import AnswerParseError, HarnessError, RenderError
from whale_core.harness.spec import (
    AnswerFormat,
    Decoding,
    FewShot,
    HarnessSpec,
    Inference,
    Message,
    ParseStep,
    sha256_text,
)

__all__ = [
    "AnswerFormat",
    "AnswerParseError",
    "Decoding",
    "FewShot",
    "Harness",
    "HarnessError",
    "HarnessSpec",
    "Inference",
    "Message",
    "ParseStep",
    "RenderError",
    "sha256_text",
]
