"""WHALE's own OpenAI-compatible server for the ``served:`` proposer: chat completions with enforced JSON output.

``python -m whale_core.proposers.local_server MODEL_DIR --port P [--device cpu]`` (started and stopped by
`whale_core.proposers.serve`, never by hand). It answers ``GET /health``, ``GET /v1/models`` and
``POST /v1/chat/completions`` (non-streaming) for the one model it loaded.

Why not ``transformers serve``, which served the proposer before: it ignores ``response_format`` (transformers 5.24
lists it in ``UNUSED_CHAT_COMPLETION_FIELDS``), and a small model asked for JSON without a grammar writes prose,
YAML or a broken object often enough to waste most requests. Here a request's ``response_format`` is enforced token
by token with a grammar library's logits processor (`whale_core.proposers.grammar`): ``json_schema`` constrains the
reply to the schema, ``json_object`` to any JSON object, so the reply parses by construction (unless it is cut off
at ``max_tokens``, which ``finish_reason: "length"`` says).

Request fields read: ``messages`` (chat-templated by the model's tokenizer), ``max_tokens`` (default 256, within
the window), ``temperature``, ``top_p``, ``seed``, ``stop``, ``response_format``, and ``generation_config`` (a JSON
string, as `transformers serve` takes it: ``do_sample``, ``temperature``, ``top_p``; what ``ServedProposer.sampling``
sends). Other fields are ignored. A malformed request is answered 400 with the reason (a schema the grammar
library cannot compile included: litellm raises it as ``BadRequestError``); a failure while generating, 500.

Simplified: one request generates at a time (a lock; the proposer sends one at a time anyway), no streaming, no
batching, no tools; it listens on 127.0.0.1 only and has no authentication.
"""

from __future__ import annotations

import argparse
import json
import logging
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

__all__ = ["BadRequest", "Generator", "main"]

log = logging.getLogger("whale.proposer_server")
DEFAULT_MAX_TOKENS = 256
MAX_BODY_BYTES = 4 * 1024 * 1024


class BadRequest(ValueError):
    """A request this server cannot honour (answered 400 with the message)."""


class Generator:
    """The loaded model and its tokenizer; `complete` answers one chat-completion request body."""

    def __init__(self, model_dir: Path, device: str = "cpu") -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.torch = torch
        self.name = str(model_dir)
        self.tokenizer: Any = AutoTokenizer.from_pretrained(str(model_dir))
        model: Any = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=torch.float32)
        self.device = device if device != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
        self.model: Any = model.to(self.device).eval()
        self.window = int(getattr(self.model.config, "max_position_embeddings", 2048) or 2048)
        self.lock = threading.Lock()
        self._grammar: Any = None

    @property
    def grammar(self) -> Any:
        """The grammar backend (`whale_core.proposers.grammar.Grammar`), built on first use."""
        if self._grammar is None:
            from whale_core.proposers.grammar import Grammar

            self._grammar = Grammar(self.tokenizer, vocab_size=int(self.model.config.vocab_size))
        return self._grammar

    def complete(self, body: dict[str, Any]) -> dict[str, Any]:
        """One chat completion (OpenAI's response shape). Raises `BadRequest`."""
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages or not all(isinstance(m, dict) for m in messages):
            raise BadRequest("'messages' must be a non-empty list of {role, content} objects")
        try:
            templated: Any = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
        except Exception as exc:
            raise BadRequest(f"the messages do not fit the model's chat template: {exc}") from None
        ids: list[int] = list(templated["input_ids"] if hasattr(templated, "keys") else templated)
        room = self.window - len(ids)
        max_tokens = _int(body.get("max_tokens") or body.get("max_completion_tokens") or DEFAULT_MAX_TOKENS)
        if room < 1:
            raise BadRequest(f"the prompt is {len(ids)} tokens: no room in the model's window of {self.window}")
        max_tokens = max(1, min(max_tokens, room))
        sampling = _sampling(body)
        processors = self._processors(body.get("response_format"))
        torch = self.torch
        with self.lock:
            if body.get("seed") is not None:
                torch.manual_seed(_int(body["seed"]))
            inputs = torch.tensor([ids], device=self.device)
            start = time.perf_counter()
            with torch.no_grad():
                out = self.model.generate(
                    inputs,
                    attention_mask=torch.ones_like(inputs),
                    max_new_tokens=max_tokens,
                    logits_processor=processors,
                    pad_token_id=self.tokenizer.pad_token_id or self.tokenizer.eos_token_id,
                    eos_token_id=self.tokenizer.eos_token_id,
                    stop_strings=_stops(body.get("stop")),
                    tokenizer=self.tokenizer,
                    **sampling,
                )
            seconds = time.perf_counter() - start
        new = out[0][len(ids) :].tolist()
        ended = bool(new) and new[-1] == self.tokenizer.eos_token_id
        text = self.tokenizer.decode(new, skip_special_tokens=True)
        finish = "length" if len(new) >= max_tokens and not ended else "stop"
        log.info("%d prompt + %d completion tokens in %.1f s (%s)", len(ids), len(new), seconds, finish)
        return {
            "id": f"chatcmpl-{uuid.uuid4().hex[:24]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.name,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}],
            "usage": {"prompt_tokens": len(ids), "completion_tokens": len(new), "total_tokens": len(ids) + len(new)},
        }

    def _processors(self, response_format: Any) -> list[Any] | None:
        if response_format is None:
            return None
        if not isinstance(response_format, dict):
            raise BadRequest('\'response_format\' must be an object such as {"type": "json_object"}')
        kind = response_format.get("type")
        if kind in (None, "text"):
            return None
        if kind == "json_object":
            return [self.grammar.json_object()]
        if kind == "json_schema":
            spec = response_format.get("json_schema") or {}
            schema = spec.get("schema") if isinstance(spec, dict) else None
            if not isinstance(schema, dict):
                raise BadRequest("response_format json_schema needs {'json_schema': {'schema': {...}}}")
            try:
                return [self.grammar.json_schema(schema)]
            except Exception as exc:
                raise BadRequest(f"the JSON schema could not be compiled: {exc}") from None
        raise BadRequest(f"response_format type {kind!r} is not supported (text, json_object, json_schema)")


def _int(value: Any) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        raise BadRequest(f"expected an integer, got {str(value)[:40]!r}") from None


def _sampling(body: dict[str, Any]) -> dict[str, Any]:
    """``do_sample``/``temperature``/``top_p`` from ``generation_config`` (a JSON string) or the body."""
    config: dict[str, Any] = {}
    raw = body.get("generation_config")
    if raw:
        try:
            config = json.loads(raw) if isinstance(raw, str) else dict(raw)
        except (ValueError, TypeError):
            raise BadRequest("'generation_config' must be a JSON object (as a string)") from None
    temperature = float(config.get("temperature", body.get("temperature", 0.0)) or 0.0)
    top_p = float(config.get("top_p", body.get("top_p", 1.0)) or 1.0)
    do_sample = bool(config.get("do_sample", temperature > 0)) and temperature > 0
    if not do_sample:
        return {"do_sample": False, "temperature": None, "top_p": None, "top_k": None}
    return {"do_sample": True, "temperature": temperature, "top_p": top_p, "top_k": None}


def _stops(stop: Any) -> list[str] | None:
    if stop is None:
        return None
    stops = [stop] if isinstance(stop, str) else stop
    if not isinstance(stops, list) or not all(isinstance(s, str) and s for s in stops):
        raise BadRequest("'stop' must be a string or a list of strings")
    return stops[:4] or None


def _handler(generator: Generator) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            log.debug(format, *args)

        def _send(self, status: int, payload: dict[str, Any]) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _error(self, status: int, message: str) -> None:
            kind = "invalid_request_error" if status == 400 else "server_error"
            self._send(status, {"error": {"message": message, "type": kind, "code": status}})

        def do_GET(self) -> None:
            if self.path == "/health":
                self._send(200, {"status": "ok"})
            elif self.path == "/v1/models":
                self._send(200, {"object": "list", "data": [{"id": generator.name, "object": "model"}]})
            else:
                self._error(404, f"no route {self.path}")

        def do_POST(self) -> None:
            size = int(self.headers.get("Content-Length") or 0)
            if size > MAX_BODY_BYTES:
                self._error(400, f"request body over {MAX_BODY_BYTES} bytes")
                return
            raw = self.rfile.read(size)
            if self.path.rstrip("/") != "/v1/chat/completions":
                self._error(404, f"no route {self.path}")
                return
            try:
                body = json.loads(raw or b"{}")
                if not isinstance(body, dict):
                    raise BadRequest("the body must be a JSON object")
                self._send(200, generator.complete(body))
            except (BadRequest, ValueError) as exc:
                self._error(400, str(exc))
            except Exception as exc:  # a generation failure: answered, logged, the server stays up
                log.exception("chat completion failed")
                self._error(500, f"{type(exc).__name__}: {exc}")

    return Handler


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="whale-proposer-server", description=__doc__.splitlines()[0])
    parser.add_argument("model_dir", type=Path)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--log-level", default="warning")
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    generator = Generator(args.model_dir, args.device)
    server = ThreadingHTTPServer((args.host, args.port), _handler(generator))
    server.daemon_threads = True
    log.warning("serving %s on http://%s:%d/v1", args.model_dir, args.host, args.port)
    try:
        server.serve_forever()
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
