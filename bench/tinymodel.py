"""The embedded default model: a tiny Qwen2-architecture directory generated offline.

Weights are never stored: the engine is started with `--load-format dummy` (random weights),
so the directory holds only config.json, a byte-level BPE tokenizer trained here on local
text with `tokenizers`, and generation_config.json. Nothing is fetched from a model hub.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

# Shape chosen so that one decode step costs a few ms on a 2-core CPU and the KV pool in
# tokens is easy to reason about: 2 layers x 2 KV heads x head_dim 64 x 2 B (bf16) x 2 (K,V).
TINY_CONFIG = {
    "architectures": ["Qwen2ForCausalLM"],
    "model_type": "qwen2",
    "hidden_size": 256,
    "intermediate_size": 704,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "hidden_act": "silu",
    "max_position_embeddings": 4096,
    "max_window_layers": 2,
    "rms_norm_eps": 1e-6,
    "rope_theta": 10000.0,
    "sliding_window": None,
    "use_sliding_window": False,
    "tie_word_embeddings": True,
    "torch_dtype": "bfloat16",
    "vocab_size": 4096,
    "bos_token_id": 0,
    "eos_token_id": 1,
    "attention_dropout": 0.0,
    "initializer_range": 0.02,
    "use_cache": True,
}
SPECIAL_TOKENS = ["<|endoftext|>", "<|im_end|>", "<|im_start|>"]
CHAT_TEMPLATE = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


def training_corpus() -> list[str]:
    """Local text to train the tokenizer on: the Python standard library's own sources."""
    import os
    root = Path(os.__file__).parent
    texts = []
    for p in sorted(root.glob("*.py"))[:200]:
        texts.append(p.read_text(encoding="utf-8", errors="replace"))
    return texts


def build_tokenizer(vocab_size: int):
    """Train a byte-level BPE tokenizer with exactly VOCAB_SIZE entries on local text."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(training_corpus(), trainer=trainer)
    return tok


def write_model_dir(out: Path) -> Path:
    """Write config.json, tokenizer files and generation_config.json into OUT (idempotent)."""
    out.mkdir(parents=True, exist_ok=True)
    config = dict(TINY_CONFIG)
    tok = build_tokenizer(config["vocab_size"])
    # The embedding table must cover every id the tokenizer can emit.
    assert tok.get_vocab_size() <= config["vocab_size"], tok.get_vocab_size()
    tok.save(str(out / "tokenizer.json"))
    eos = SPECIAL_TOKENS[0]
    (out / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": 4096,
        "bos_token": None,
        "eos_token": eos,
        "pad_token": eos,
        "unk_token": None,
        "added_tokens_decoder": {
            str(tok.token_to_id(t)): {"content": t, "special": True, "lstrip": False,
                                      "rstrip": False, "normalized": False, "single_word": False}
            for t in SPECIAL_TOKENS
        },
        "chat_template": CHAT_TEMPLATE,
    }, indent=2) + "\n")
    config["bos_token_id"] = tok.token_to_id(eos)
    config["eos_token_id"] = tok.token_to_id(eos)
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    (out / "generation_config.json").write_text(json.dumps({
        "bos_token_id": config["bos_token_id"], "eos_token_id": config["eos_token_id"],
    }, indent=2) + "\n")
    return out


def write_config_dir(config_path: Path, out: Path) -> Path:
    """Write CONFIG_PATH's config.json into OUT with a word-level tokenizer that knows every id
    of its vocab_size: random weights emit ids across the whole vocabulary, and ids a smaller
    tokenizer lacks make the server's detokeniser the bottleneck."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    config = json.loads(Path(config_path).read_text(encoding="utf-8"))
    n = config.get("vocab_size")
    if not isinstance(n, int) or isinstance(n, bool) or not 0 < n <= 4_000_000:
        raise SystemExit(f"{config_path}: vocab_size must be a positive integer, got {n!r}")
    out.mkdir(parents=True, exist_ok=True)
    tok = Tokenizer(models.WordLevel(vocab={f"t{i}": i for i in range(n)}, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tok.save(str(out / "tokenizer.json"))
    (out / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "PreTrainedTokenizerFast", "unk_token": "t0",
         "model_max_length": config.get("max_position_embeddings", 32768)}, indent=2) + "\n")
    (out / "config.json").write_text(json.dumps(config, indent=2) + "\n")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Generate the embedded tiny model directory, or a "
                                             "served model directory for a given config.json.")
    ap.add_argument("--out", default=".engine/tiny-qwen2")
    ap.add_argument("--config", help="a model's config.json: write it with a tokenizer covering "
                                     "its whole vocabulary (for --load-format dummy)")
    args = ap.parse_args(argv)
    path = (write_config_dir(Path(args.config), Path(args.out)) if args.config
            else write_model_dir(Path(args.out)))
    print(f"model directory: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
