"""`load_policy` on model directories the project did not build, hub ids, adapters, devices and policy ids."""

from __future__ import annotations

from pathlib import Path

import pytest

from whale_core.models.policy import PolicyLoadError, base_model_id, check_model, load_policy, select_device


def _foreign_model(path: Path) -> Path:
    """A random-init Llama with its own word-level tokenizer that has no pad token and pads on the right."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    vocab = {"<s>": 0, "</s>": 1, "<unk>": 2}
    for c in "0123456789+= abcdefghijklmnopqrstuvwxyz.\n":
        vocab.setdefault(c, len(vocab))
    tk = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    tk.pre_tokenizer = pre_tokenizers.Split("", "isolated")
    tk.decoder = decoders.Fuse()
    tok = PreTrainedTokenizerFast(
        tokenizer_object=tk, bos_token="<s>", eos_token="</s>", unk_token="<unk>", padding_side="right"
    )
    config = LlamaConfig(
        vocab_size=len(vocab), hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=2,
        num_key_value_heads=2, max_position_embeddings=64, bos_token_id=0, eos_token_id=1,
    )  # fmt: skip
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(1)
        LlamaForCausalLM(config).save_pretrained(path)
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="module")
def foreign(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _foreign_model(tmp_path_factory.mktemp("foreign"))


def test_loads_a_foreign_local_model_with_left_padding_and_a_pad_token(foreign: Path) -> None:
    import torch

    p = load_policy(foreign, device="cpu")
    assert p.tokenizer.padding_side == "left"
    assert p.tokenizer.pad_token == p.tokenizer.eos_token == "</s>"
    assert p.device == torch.device("cpu")
    assert p.base_path == foreign.resolve() and p.adapter_path is None
    assert next(p.model.parameters()).dtype == torch.float32
    assert not p.model.training and not any(t.requires_grad for t in p.model.parameters())
    enc = p.tokenizer(["1+2=", "11+22="], return_tensors="pt", padding=True)
    assert enc.attention_mask[0, 0] == 0  # padded on the left
    out = p.model.generate(**enc, max_new_tokens=3, do_sample=False)
    assert out.shape == (2, enc.input_ids.shape[1] + 3)


def test_policy_id_is_stable_and_content_based(foreign: Path, tmp_path: Path) -> None:
    a = load_policy(foreign, device="cpu").policy_id
    assert a == load_policy(str(foreign), device="cpu").policy_id == base_model_id(foreign)
    assert len(a) == 16
    other = _foreign_model(tmp_path / "copy")
    assert base_model_id(other) == a  # same content, other place: same id
    cfg = (other / "config.json").read_text()
    (other / "config.json").write_text(cfg.replace('"hidden_act"', '"initializer_range": 0.5, "hidden_act"', 1))
    assert base_model_id(other) != a


def test_hub_id_without_local_copy_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(PolicyLoadError, match=r"looks like a hub id.*never downloads.*Qwen/Qwen2.5-0.5B"):
        load_policy("Qwen/Qwen2.5-0.5B", device="cpu")
    with pytest.raises(
        PolicyLoadError, match=r"neither 'tiny', a named model .* nor an existing local model directory"
    ):
        load_policy(str(tmp_path / "nowhere"), device="cpu")
    (tmp_path / "empty").mkdir()
    with pytest.raises(PolicyLoadError, match=r"no config\.json"):
        load_policy(tmp_path / "empty", device="cpu")


def test_adapter_changes_outputs_and_policy_id(foreign: Path, tmp_path: Path) -> None:
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    base = AutoModelForCausalLM.from_pretrained(foreign, local_files_only=True)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(3)
        lora = get_peft_model(
            base, LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False)
        )
    lora.save_pretrained(str(tmp_path / "adapter"))

    plain = load_policy(foreign, device="cpu")
    tuned = load_policy(foreign, adapter=tmp_path / "adapter", device="cpu")
    assert tuned.adapter_path == (tmp_path / "adapter").resolve()
    assert tuned.policy_id != plain.policy_id and len(tuned.policy_id) == 16
    assert tuned.policy_id == load_policy(foreign, adapter=tmp_path / "adapter", device="cpu").policy_id
    ids = plain.tokenizer(["1+2="], return_tensors="pt").input_ids
    with torch.no_grad():
        assert not torch.allclose(plain.model(ids).logits, tuned.model(ids).logits)
    trainable = load_policy(foreign, adapter=tmp_path / "adapter", device="cpu", trainable=True)
    names = [n for n, t in trainable.model.named_parameters() if t.requires_grad]
    assert names and all("lora_" in n for n in names)
    with pytest.raises(PolicyLoadError, match="not a PEFT adapter directory"):
        load_policy(foreign, adapter=tmp_path, device="cpu")

    # for inference the adapter can be merged into the weights: no LoRA layer left, the same logits up to rounding,
    # the same id; a merged policy refuses to be trained (its adapter is no longer separable)
    from peft.tuners.tuners_utils import BaseTunerLayer

    from whale_core.legs.grpo import prepare_model
    from whale_core.legs.weights_config import WeightsConfig

    merged = load_policy(foreign, adapter=tmp_path / "adapter", device="cpu", merge_adapter=True)
    assert merged.merged and not tuned.merged and merged.policy_id == tuned.policy_id
    assert not any(isinstance(m, BaseTunerLayer) for m in merged.model.modules())
    with torch.no_grad():
        torch.testing.assert_close(merged.model(ids).logits, tuned.model(ids).logits, rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="adapter is merged into its weights"):
        prepare_model(merged, WeightsConfig(), None)
    assert not load_policy(foreign, adapter=tmp_path / "adapter", device="cpu", trainable=True,
                           merge_adapter=True).merged  # fmt: skip


def test_select_device() -> None:
    import torch

    assert select_device("cpu") == torch.device("cpu")
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus:
        assert select_device(f"cuda:{gpus - 1}") == torch.device(f"cuda:{gpus - 1}")
    # a device this machine does not have is refused here, not by torch's assertion at the first .to()
    with pytest.raises(PolicyLoadError, match=f"device 'cuda:{gpus}' is not available"):
        select_device(f"cuda:{gpus}")
    mps = getattr(torch.backends, "mps", None)
    if mps is None or not mps.is_available():
        with pytest.raises(PolicyLoadError, match="device 'mps' is not available"):
            select_device("mps")
    expected = "cuda" if torch.cuda.is_available() else None
    auto = select_device("auto")
    assert auto.type in ("cuda", "mps", "cpu") and (expected is None or auto.type == expected)
    with pytest.raises(PolicyLoadError, match="unknown device 'tpu9'"):
        select_device("tpu9")
    with pytest.raises(PolicyLoadError, match="unsupported device 'meta'"):
        select_device("meta")


def test_check_model_fails_fast_without_loading(foreign: Path, tmp_path: Path) -> None:
    assert check_model(foreign, "cpu") == foreign.resolve()
    with pytest.raises(PolicyLoadError, match=r"adapter directory .* does not exist"):
        check_model(foreign, "cpu", adapter=tmp_path / "nowhere")
    with pytest.raises(PolicyLoadError, match="unknown device"):
        check_model(foreign, "nonsense")
    with pytest.raises(PolicyLoadError, match="neither 'tiny'"):
        check_model(tmp_path / "nowhere")
