"""A small *real-shaped* causal LM for tests: a byte-level BPE tokenizer trained here (vocab ~400) with SmolLM2's
special tokens and chat template, and a random-init Llama (~60 k parameters) on top of it.

The tiny model is character-level with no chat template; real instruct models (SmolLM2, Llama, Qwen) have BPE
tokenizers where a stop string like ``"\\n"`` may be merged into larger tokens, a bos token that is also the chat
turn marker, ``pad == eos``, and a chat template. Tests that need those properties without loading a 135 M-parameter
model use this one. Deterministic: the same files on every machine (tokenizer training and init are seeded/ordered).
"""

from __future__ import annotations

from pathlib import Path

# SmolLM2-135M-Instruct's chat template, verbatim (its tokenizer's chat_template.jinja).
CHAT_TEMPLATE = (
    "{% for message in messages %}{% if loop.first and messages[0]['role'] != 'system' %}{{ '<|im_start|>system\n"
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n' }}{% endif %}"
    "{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def _corpus() -> list[str]:
    words = "add the two numbers sum reply with number only answer is what plus equals sort these list user assistant"
    lines = [words, "You are a helpful AI assistant named SmolLM, trained by Hugging Face"]
    for a in range(0, 100, 7):
        for b in range(0, 100, 11):
            lines.append(f"Add the two numbers.\n{a}+{b}={a + b}\n{a} + {b} = {a + b}")
    return lines


def build_small_llama(path: Path, *, hidden: int = 48, layers: int = 2, seed: int = 0) -> Path:
    """Write the tokenizer and a random-init ``LlamaForCausalLM`` to ``path`` (a Hugging Face model directory)."""
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    path.mkdir(parents=True, exist_ok=True)
    tk = Tokenizer(models.BPE(unk_token="<|endoftext|>"))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tk.train_from_iterator(_corpus(), trainer=trainer)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=tk,
        bos_token="<|im_start|>",
        eos_token="<|im_end|>",
        pad_token="<|im_end|>",
        unk_token="<|endoftext|>",
        padding_side="left",
    )
    tok.chat_template = CHAT_TEMPLATE
    ids = {s: tok.convert_tokens_to_ids(s) for s in SPECIALS}
    config = LlamaConfig(
        vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden, num_hidden_layers=layers,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=1024,
        bos_token_id=ids["<|im_start|>"], eos_token_id=ids["<|im_end|>"], pad_token_id=ids["<|im_end|>"],
        tie_word_embeddings=True,
    )  # fmt: skip
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        LlamaForCausalLM(config).save_pretrained(path)
    tok.save_pretrained(path)
    return path
