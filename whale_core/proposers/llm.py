"""The `llm` proposer: any chat model reachable through litellm proposes K harness texts from the context.

One call per ``propose``: the context is rendered within a token budget (`whale_core.proposers.context`), the reply's
fenced YAML blocks are extracted, and each block goes through `check_candidate`; malformed, invalid and duplicate
blocks come back as rejected proposals with the reason. Timeouts, retries and rate limits use litellm's own
mechanisms (``timeout=``, ``num_retries=``: the OpenAI SDK retries with back-off and honours ``Retry-After``, then
litellm's wrapper retries via tenacity); once they are exhausted the proposer raises `ProposerUnavailable`.

Credentials come only from the environment: litellm reads the standard variables (``OPENAI_API_KEY``, ...), or
``api_key_env`` names a custom one that is read at call time. The key is never stored on the proposer, and every
string that leaves this module (reasons, error messages, candidate texts) has the values of credential-looking
environment variables redacted.

Bounded on arrival: a call ends within ``timeout x (num_retries + 1)`` seconds whatever the server does (litellm's
``timeout`` bounds one read, so a server that sends a byte every few seconds would hold a request forever: the call
runs in a daemon thread that the leg stops waiting for); a reply is read up to `MAX_REPLY_CHARS` and at most
``k + EXTRA_BLOCKS`` fenced blocks of it are parsed — the rest is one rejection that says how much was left unread.

Two ways to ask (``edit``): ``whole`` (the default for API models) asks for up to k complete harnesses in fenced YAML
blocks in one request — a strong model's way; ``component`` (the default for ``served:`` models) asks for one
harness component per request as a JSON object, in the strongest output mode the provider takes, feeds a rejected
reply back once with the reason, and merges the value into the incumbent (`whale_core.proposers.edits`). Either
way a reply cut off at ``max_tokens`` (finish reason ``length``) is never adopted, and the run's proposer budget
(``search.proposer_budget``, `whale_core.proposers.spend`) is checked before every request.

Simplified: in ``whole`` mode, one request per ``propose`` (no multi-turn repair of invalid candidates; the
rejection reasons go back to the model through the archive on the next iteration). litellm is imported lazily (a
slow import: seconds).
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from typing import Any, Literal

from whale_core.harness import Harness
from whale_core.proposers.base import Proposal, ProposalContext, ProposerUnavailable, check_candidate
from whale_core.proposers.components import Selector, reply_schema
from whale_core.proposers.context import build_component_messages, build_messages, estimate_tokens
from whale_core.proposers.edits import propose_components
from whale_core.proposers.replies import Completion, OutputMode, ProviderRefused
from whale_core.proposers.spend import ProposerBudgetSpent, Spend

__all__ = ["Completion", "LLMProposer", "extract_yaml_blocks", "redact"]

log = logging.getLogger(__name__)
Edit = Literal["whole", "component"]
Output = Literal["auto", "schema", "json", "fenced"]
REFUSED_STATUS = (400, 422)  # the request itself was refused (e.g. an unsupported response_format)
_LEARNED_MODES: dict[tuple[str, str | None], OutputMode] = {}  # (model, api_base) -> the mode it accepts


_FENCE = re.compile(r"^[ \t]*```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)^[ \t]*```[ \t]*$", re.MULTILINE | re.DOTALL)
_YAML_TAGS = {"", "yaml", "yml"}
_SECRET_NAME = re.compile(r"(KEY|TOKEN|SECRET|PASSWORD|CREDENTIAL)", re.IGNORECASE)
MAX_REPLY_CHARS = 200_000  # ~12 harnesses at their 16 KiB bound, with prose around them
EXTRA_BLOCKS = 8  # fenced blocks read beyond k (rejects among them do not cost a candidate)


def redact(text: str, extra_names: tuple[str, ...] = ()) -> str:
    """``text`` with the values of credential-looking environment variables (``*KEY*``, ``*TOKEN*``, ``*SECRET*``,
    ``*PASSWORD*`` and ``extra_names``) replaced by ``[redacted]``. Values shorter than 6 chars are left alone."""
    values = {
        value
        for name, value in os.environ.items()
        if (name in extra_names or _SECRET_NAME.search(name)) and len(value) >= 6
    }
    for value in sorted(values, key=len, reverse=True):
        text = text.replace(value, "[redacted]")
    return text


def extract_yaml_blocks(reply: str) -> tuple[list[str], str | None]:
    """The fenced YAML blocks of a reply (```yaml, ```yml or a bare ```), prose around them ignored.

    Returns ``(blocks, problem)``: ``problem`` describes a trailing block that was opened but never closed (a reply
    cut off by ``max_tokens``), else None. Blocks tagged with another language (```python) are skipped.
    """
    blocks = [m.group(2) for m in _FENCE.finditer(reply) if m.group(1).lower() in _YAML_TAGS]
    tail = _FENCE.sub("", reply)
    problem = None
    if re.search(r"^[ \t]*```", tail, re.MULTILINE):
        problem = "a fenced block was opened but never closed (reply cut off? raise max_tokens)"
    return blocks, problem


class LLMProposer:
    """Proposes harness candidates with a chat model through litellm (``openai/...``, ``anthropic/...``,
    ``ollama/...``, or any OpenAI-compatible server via ``api_base``).

    ``timeout`` is per request (seconds); ``num_retries`` is litellm's retry count; ``context_tokens`` bounds the
    prompt (estimated); ``max_tokens`` bounds the reply. For OpenAI-compatible providers the SDK retries
    ``num_retries`` times and then litellm's wrapper another ``num_retries`` times (measured: four HTTP 500s with
    ``num_retries=2`` → 5 requests), so the worst case is about ``timeout * (2 * num_retries + 1)`` plus back-off;
    other providers get litellm's ``num_retries`` only. ``api_key_env`` names an environment variable holding the
    API key; by default litellm reads the provider's standard variable.
    """

    def __init__(
        self,
        model: str,
        api_base: str | None = None,
        temperature: float = 0.7,
        timeout: float = 60,
        num_retries: int = 2,
        context_tokens: int = 6000,
        max_tokens: int = 2000,
        api_key_env: str | None = None,
        edit: Edit = "whole",
        output: Output = "auto",
        selector: Selector = "traces",
        feedback_retries: int = 1,
        budget_tokens: int | None = None,
        budget_usd: float | None = None,
    ) -> None:
        self.edit = edit
        self.output = output
        self._mode: OutputMode = "schema" if output == "auto" else output  # auto: steps down when refused
        self.selector = selector
        self.feedback_retries = feedback_retries
        self.budget_tokens = budget_tokens
        self.budget_usd = budget_usd
        self.model = model
        self.api_base = api_base
        self.temperature = temperature
        self.timeout = timeout
        self.num_retries = num_retries
        self.context_tokens = context_tokens
        self.max_tokens = max_tokens
        self.api_key_env = api_key_env
        self.name = f"llm:{model}"

    @property
    def mode(self) -> OutputMode:
        """The output mode in use. With ``output: auto`` a mode the provider refused is remembered for this process
        and endpoint (model, api_base), so later legs' proposers (built per leg) do not ask again."""
        if self.output == "auto":
            return _LEARNED_MODES.get((self.model, self.api_base), self._mode)
        return self._mode

    @mode.setter
    def mode(self, value: OutputMode) -> None:
        self._mode = value
        if self.output == "auto":
            _LEARNED_MODES[(self.model, self.api_base)] = value

    def __repr__(self) -> str:
        return (
            f"LLMProposer(model={self.model!r}, api_base={self.api_base!r}, timeout={self.timeout}, "
            f"num_retries={self.num_retries}, api_key_env={self.api_key_env!r})"
        )

    # -- public -----------------------------------------------------------------------------------------------

    def propose(self, context: ProposalContext, k: int) -> list[Proposal]:
        """Up to ``k`` valid proposals plus rejected ones (see `Proposer`); ``k <= 0`` → no call. ``whole``: one call
        for all ``k``; ``component``: one call (or two, with the error fed back) per candidate."""
        if k <= 0:
            return []
        spend = Spend(self.budget_tokens, self.budget_usd, before=dict(context.proposer_spent))
        if self.edit == "component":
            return propose_components(self, context, k, spend)
        why = spend.exhausted()
        if why is not None:
            raise ProposerBudgetSpent(why)
        messages = build_messages(context, k, self.context_tokens)
        reply = self._complete(messages)
        usage = reply.usage | {"requests": 1.0}
        if reply.finish_reason == "length":
            reason = (
                f"the reply was cut off at max_tokens={self.max_tokens} (finish reason 'length'): no candidate of a "
                "cut-off reply is adopted; raise max_tokens or ask for fewer candidates"
            )
            return [Proposal(reply.text, None, "rejected", reason, self.name, usage=usage | {"truncated": 1.0})]
        return self._proposals(reply.text, context, k, usage)

    # -- the component loop's hooks (`whale_core.proposers.edits`) ---------------------------------------------

    def component_messages(
        self, context: ProposalContext, component: str, current: str, form: str, fenced: bool, pivot: str | None
    ) -> tuple[list[dict[str, str]], int]:
        """The messages asking for a new value of ``component``, and the reply's token allowance."""
        messages = build_component_messages(context, component, current, form, fenced, self.context_tokens, pivot=pivot)
        return messages, self.max_tokens

    def pivot(self, component: str, incumbent: Harness, turn: int) -> str | None:
        """The setting a request's schema requires to change (`require_change`): none for API models, whose
        providers each accept a different subset of JSON schema and which do not copy the value back."""
        return None

    def fits(self, messages: list[dict[str, str]], reply_tokens: int) -> bool:
        """Whether a (longer, feedback) request still fits the prompt budget (estimated)."""
        return sum(estimate_tokens(m["content"]) for m in messages) <= self.context_tokens + reply_tokens

    def reply_schema(self, component: str, incumbent: Harness, reply_tokens: int) -> dict[str, Any]:
        """The reply's JSON schema; strings capped at what ``reply_tokens`` can hold (~2 characters a token)."""
        return reply_schema(component, incumbent, max_chars=max(32, 2 * reply_tokens))

    def request_extra(self, context: ProposalContext, index: int, attempt: int) -> dict[str, Any]:
        """Extra request parameters for a component request (none for API models)."""
        return {}

    def ask(self, messages: list[dict[str, str]], max_tokens: int, extra: dict[str, Any]) -> Completion:
        """One request of the component loop."""
        return self._complete(messages, max_tokens=max_tokens, extra=extra)

    def say(self, message: str) -> None:
        """A note for the run's log."""
        log.warning("%s: %s", self.name, self._redact(message))

    # -- internals --------------------------------------------------------------------------------------------

    def _redact(self, text: str) -> str:
        return redact(text, (self.api_key_env,) if self.api_key_env else ())

    def _unavailable(self, cause: str) -> ProposerUnavailable:
        return ProposerUnavailable(self._redact(f"LLM proposer {self.model!r} unavailable: {cause}"))

    def _api_key(self, litellm: Any) -> str | None:
        """The key from ``api_key_env``, or None to let litellm read the standard variable (checked to exist)."""
        if self.api_key_env:
            key = os.environ.get(self.api_key_env)
            if not key:
                raise self._unavailable(f"environment variable {self.api_key_env} (api_key_env) is not set")
            return key
        try:
            env = litellm.validate_environment(model=self.model, api_base=self.api_base)
        except Exception:  # an unknown provider: let the call itself say what is wrong
            return None
        missing = [name for name in env.get("missing_keys") or [] if _SECRET_NAME.search(name)]
        if not env.get("keys_in_environment", True) and missing:  # e.g. OLLAMA_API_BASE is not a credential
            raise self._unavailable(f"no API key configured: set {', '.join(missing)} (or api_key_env)")
        return None

    def _complete(
        self, messages: list[dict[str, str]], max_tokens: int | None = None, extra: dict[str, Any] | None = None
    ) -> Completion:
        """One chat completion: the reply's text (redacted), finish reason and usage. ``max_tokens`` overrides the
        proposer's for this request; ``extra`` adds request parameters (``seed``, ``extra_body``,
        ``response_format``). A refused request (HTTP 400/404/422, an unsupported parameter) raises
        `ProviderRefused`; every other failure after litellm's retries `ProposerUnavailable`."""
        os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # as setup_offline_env(), without a mkdir
        import litellm

        litellm.suppress_debug_info = True
        api_key = self._api_key(litellm)
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "temperature": self.temperature,
            "max_tokens": max_tokens or self.max_tokens,
            "timeout": self.timeout,
            "num_retries": self.num_retries,
            "drop_params": True,
            **(extra or {}),
        }
        if self.api_base:
            kwargs["api_base"] = self.api_base
        if api_key:
            kwargs["api_key"] = api_key
        start = time.perf_counter()
        failure: str | None = None
        refused = False
        try:
            response = self._within_deadline(litellm.completion, kwargs)
        except Exception as exc:  # provider errors of every kind, after litellm's retries
            failure = f"{type(exc).__name__} after {self.num_retries} retries: {str(exc)[:500]}"
            status = getattr(exc, "status_code", None)
            refused = status in REFUSED_STATUS or type(exc).__name__ == "UnsupportedParamsError"
        if failure is not None:  # raised outside the except block: the original exception is not chained
            if refused:
                raise ProviderRefused(self._redact(f"LLM proposer {self.model!r} refused the request: {failure}"))
            raise self._unavailable(failure)
        latency = time.perf_counter() - start
        try:
            content = str(response.choices[0].message.content or "")
            finish = str(response.choices[0].finish_reason or "stop")
        except (AttributeError, IndexError, TypeError):
            raise self._unavailable("the reply had no message content") from None
        if len(content) > MAX_REPLY_CHARS:  # read no further: the blocks before the cut are still candidates
            content = content[:MAX_REPLY_CHARS] + f"\n[reply cut at {MAX_REPLY_CHARS:,} of {len(content):,} characters]"
        usage_obj = getattr(response, "usage", None)
        try:
            cost = float(litellm.completion_cost(completion_response=response) or 0.0)
        except Exception:  # unknown model / no price: cost is unknown, not an error
            cost = 0.0
        usage = {
            "prompt_tokens": float(getattr(usage_obj, "prompt_tokens", 0) or 0),
            "completion_tokens": float(getattr(usage_obj, "completion_tokens", 0) or 0),
            "cost_usd": cost,
            "latency_s": latency,
        }
        return Completion(self._redact(content), finish, usage)

    def _within_deadline(self, call: Any, kwargs: dict[str, Any]) -> Any:
        """``call(**kwargs)``, waited for at most ``timeout x (num_retries + 1)`` seconds: past that, `TimeoutError`
        (the call goes on in its daemon thread until its server lets go; nothing waits for it)."""
        box: dict[str, Any] = {}

        def run() -> None:
            try:
                box["value"] = call(**kwargs)
            except BaseException as exc:  # handed to the waiting thread
                box["error"] = exc

        deadline = self.timeout * (self.num_retries + 1)
        worker = threading.Thread(target=run, name="whale-llm-call", daemon=True)
        worker.start()
        worker.join(deadline)
        if worker.is_alive():
            raise TimeoutError(f"no complete reply within {deadline:.0f} s (timeout x (num_retries + 1))")
        if "error" in box:
            raise box["error"]
        return box["value"]

    def _proposals(self, reply: str, context: ProposalContext, k: int, usage: dict[str, float]) -> list[Proposal]:
        incumbent = Harness.from_text(context.incumbent.text)
        known = {entry.sha: entry for entry in context.archive}
        blocks, problem = extract_yaml_blocks(reply)
        unread = len(blocks) - (k + EXTRA_BLOCKS)
        blocks = blocks[: k + EXTRA_BLOCKS]
        out: list[Proposal] = []
        seen: set[str] = set()
        n_valid = 0
        for block in blocks:
            prop = check_candidate(block, incumbent, context.restrict_to, proposer=self.name)
            if prop.harness is not None:
                sha = prop.harness.sha
                if sha in known:
                    entry = known[sha]
                    prop = self._reject(block, f"duplicate of archive entry {sha[:12]} (status: {entry.status})")
                elif sha in seen:
                    prop = self._reject(block, "duplicate of an earlier candidate in the same reply")
                elif n_valid >= k:
                    prop = self._reject(block, f"more than k={k} candidates in the reply; kept the first {k}")
                else:
                    seen.add(sha)
                    n_valid += 1
            out.append(prop)
        if unread > 0:
            out.append(self._reject(None, f"{unread} more fenced blocks in the reply were not read (at most k + "
                                          f"{EXTRA_BLOCKS} = {k + EXTRA_BLOCKS} are)"))  # fmt: skip
        if problem is not None:
            out.append(self._reject(None, problem))
        if not out:
            out.append(self._reject(None, "the reply contained no fenced YAML block"))
        share = {key: value / len(out) for key, value in usage.items()}
        return [
            Proposal(
                text=p.text,
                harness=p.harness,
                status=p.status,
                reason=p.reason,
                proposer=self.name,
                usage=dict(share),
            )
            for p in out
        ]

    def _reject(self, text: str | None, reason: str) -> Proposal:
        return Proposal(text=text, harness=None, status="rejected", reason=reason, proposer=self.name)
