"""A local model served for the harness proposer: WHALE's own OpenAI-compatible server, started and stopped by WHALE.

``search.proposer=served:DIR`` (or ``served:NAME`` for a named, installed model) makes a local instruct model the
harness proposer. `serve` starts the model's OpenAI-compatible server the first time a proposer needs it in this
process and hands the same server to every later harness leg; the proposer reaches it through litellm like any
provider (`whale_core.proposers.served`). The server is `whale_core.proposers.local_server` (chat completions with
``response_format`` enforced by a grammar; ``transformers serve`` ignores that field), with the model loaded at
start, on a free port on 127.0.0.1, ``--device cpu`` unless told otherwise, offline (``HF_HUB_OFFLINE=1``).

As with WHALE's Prefect server (``flows/prefect_server.py``):

- the server dies with this process: the child sets Linux ``PR_SET_PDEATHSIG`` (SIGTERM) before it imports anything,
  and exits at once if its parent is already gone. The death signal fires when the *thread* that spawned the child
  ends, and proposers run in Prefect's worker threads, which come and go; so every server is spawned from one
  long-lived thread of this module's own (`_SPAWNER`), which lives as long as the process;
- it is stopped at exit (``atexit``: SIGTERM, then SIGKILL after 5 s);
- its output goes to ``$WHALE_HOME/proposer-server.log`` (appended); a start that fails (the process exits, or no
  answer on ``/health`` within the timeout) raises `ProposerServerError` quoting the log's tail.

A server found dead when a leg asks for it (killed, crashed mid-leg) is started again; a request to a server that
dies mid-call fails inside litellm and the proposer raises `ProposerUnavailable`, which the leg records.

Simplified: one server per model directory per process, never shared between processes (a `whale compare` of
several runs in one process shares it; parallel processes each start their own); no authentication (it only
listens on 127.0.0.1).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

from whale_core.env import whale_home
from whale_core.errors import WhaleError
from whale_core.process import ServerProcess, free_port

__all__ = ["LocalServer", "ProposerServerError", "ServedModel", "resolve_served_model", "serve", "stop_all"]

# The child sets PR_SET_PDEATHSIG (prctl option 1), checks that its parent is still alive (it may have died before
# the prctl), then runs the server in-process. argv: parent pid, then the server's arguments.
_LAUNCHER = """
import ctypes, os, signal, sys
parent = int(sys.argv.pop(1))
if sys.platform.startswith("linux"):
    ctypes.CDLL(None, use_errno=True).prctl(1, int(signal.SIGTERM), 0, 0, 0)
if os.getppid() != parent:
    sys.exit(0)
from whale_core.proposers.local_server import main
sys.exit(main(sys.argv[1:]))
"""

# One long-lived thread spawns every server (see the module docstring: the death signal follows the spawning thread).
_SPAWNER = ThreadPoolExecutor(max_workers=1, thread_name_prefix="whale-proposer-server")
_LOCK = threading.Lock()
_servers: dict[Path, LocalServer] = {}


class ProposerServerError(WhaleError, RuntimeError):
    """The served proposer's model is not servable, or its server exited or did not answer in time."""


@dataclass(frozen=True)
class ServedModel:
    """A local chat model directory the proposer can serve: its path and its context window (positions)."""

    path: Path
    context_window: int


def resolve_served_model(spec: str, home: Path | None = None) -> ServedModel:
    """The model a ``served:SPEC`` proposer names: a local Hugging Face directory, or a named installed model.

    Raises `ProposerServerError` naming the problem when it is neither, has no ``config.json``, or its tokenizer has
    no chat template (``/v1/chat/completions`` needs one; the built-in tiny model has none).
    """
    path = Path(spec).expanduser()
    if not path.is_dir():
        named = None
        with contextlib.suppress(ImportError):  # named models: whale_core.models.named (`whale models list`)
            from whale_core.models.named import resolve_named

            named = resolve_named(spec, home)
        if named is None:
            raise ProposerServerError(
                f"search.proposer 'served:{spec}': {spec!r} is neither a local model directory nor an installed "
                "named model (`whale models list`); use served:/path/to/hf-model-dir or served:NAME"
            )
        path = Path(named)
    path = path.resolve()
    config = path / "config.json"
    if not config.exists():
        raise ProposerServerError(f"served proposer: {path} has no config.json: not a Hugging Face model directory")
    if not _has_chat_template(path):
        raise ProposerServerError(
            f"served proposer: the tokenizer in {path} has no chat template (chat_template.jinja or "
            "tokenizer_config.json's chat_template); serve an instruct/chat model"
        )
    try:
        window = int(json.loads(config.read_text()).get("max_position_embeddings") or 2048)
    except (ValueError, TypeError) as exc:
        raise ProposerServerError(f"served proposer: {config} is not valid JSON: {exc}") from None
    return ServedModel(path, window)


def _has_chat_template(path: Path) -> bool:
    if (path / "chat_template.jinja").exists() or (path / "chat_template.json").exists():
        return True
    try:
        return bool(json.loads((path / "tokenizer_config.json").read_text()).get("chat_template"))
    except (OSError, ValueError):
        return False


@dataclass
class LocalServer(ServerProcess):
    """A proposer server process this process started for one model directory; its lifecycle (wait, stop) is
    `whale_core.process.ServerProcess`'s."""

    timeout_key: ClassVar[str] = "search.served.start_timeout"
    error: ClassVar[type[Exception]] = ProposerServerError

    model_dir: Path
    process: subprocess.Popen[bytes]
    port: int
    log_path: Path
    log_offset: int  # where this server's output starts in the (appended) log
    started_at: float  # time.perf_counter() at spawn
    ready_seconds: float | None = None  # spawn to the first healthy answer (set by `wait`)

    @property
    def api_base(self) -> str:
        """The OpenAI-compatible base URL (litellm's ``api_base``)."""
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def model(self) -> str:
        """The model name requests must carry: the served path itself."""
        return str(self.model_dir)

    @property
    def what(self) -> str:
        return f"the proposer's model server for {self.model_dir}"


def _spawn(model_dir: Path, device: str, log_path: Path) -> LocalServer:
    """Start the process (runs on `_SPAWNER`'s thread)."""
    port = free_port()
    args = [sys.executable, "-c", _LAUNCHER, str(os.getpid()), str(model_dir)]
    args += ["--host", "127.0.0.1", "--port", str(port), "--device", device, "--log-level", "warning"]
    env = dict(os.environ)
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    env.pop("PYTHONSTARTUP", None)
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as out:
        offset = out.tell()
        out.write(f"--- whale: serving {model_dir} on 127.0.0.1:{port} ({time.strftime('%F %T')})\n".encode())
        out.flush()
        process = subprocess.Popen(args, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
    return LocalServer(model_dir, process, port, log_path, offset, time.perf_counter())


def serve(
    model: ServedModel | Path, *, device: str = "cpu", start_timeout: float = 300, log_path: Path | None = None
) -> LocalServer:
    """The running server for ``model`` in this process, started (and waited for) on first use; see the module
    docstring. A server that has died since is replaced. Raises `ProposerServerError` if it cannot start."""
    model_dir = (model.path if isinstance(model, ServedModel) else Path(model)).resolve()
    with _LOCK:
        server = _servers.get(model_dir)
        if server is not None and not server.alive():
            _servers.pop(model_dir)
            server = None
        if server is None:
            log = log_path or whale_home() / "proposer-server.log"
            server = _SPAWNER.submit(_spawn, model_dir, device, log).result()
            _servers[model_dir] = server
        try:
            server.wait(start_timeout)
        except ProposerServerError:
            _servers.pop(model_dir, None)
            raise
        return server


def running() -> list[LocalServer]:
    """The servers this process has started and that are still running."""
    with _LOCK:
        return [s for s in _servers.values() if s.alive()]


def stop_all() -> None:
    """Stop every server this process started (registered with ``atexit``)."""
    with _LOCK:
        servers = list(_servers.values())
        _servers.clear()
    for server in servers:
        server.stop()


atexit.register(stop_all)
