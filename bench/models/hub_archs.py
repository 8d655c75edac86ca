"""The architectures of the Hub models the paper configs train, without their weights.

No machine that runs the tests can reach the Hub, yet every shipped paper config must build
"everything short of downloading weights", and a GPU machine without Hub access must still be able
to time a real-sized run. So the architecture hyper-parameters of those models are written down
here, copied from each model's published ``config.json`` (and checked in the tests against the
parameter counts on its model card). With them:

- :func:`meta_model` builds the exact module tree on the ``meta`` device (no memory, no weights):
  parameter counts, LoRA targets, FSDP wrapping and memory estimates are real;
- :func:`random_checkpoint` saves a randomly initialised model of that architecture with a
  tokenizer of the same vocabulary size, which loads through the ordinary ``from_pretrained`` path
  (throughput and memory checks on a GPU).

A name not listed here is looked up with ``AutoConfig.from_pretrained`` (a local directory or the
Hub's config file, when reachable).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from bench.errors import CreditBenchError

_QWEN3 = dict(
    model_type="qwen3",
    head_dim=128,
    vocab_size=151936,
    max_position_embeddings=40960,
    rope_theta=1_000_000.0,
    rms_norm_eps=1e-6,
    hidden_act="silu",
    attention_bias=False,
    bos_token_id=151643,
    eos_token_id=151645,
)
_QWEN2 = dict(
    model_type="qwen2",
    hidden_act="silu",
    rms_norm_eps=1e-6,
    attention_dropout=0.0,
    bos_token_id=151643,
    eos_token_id=151643,
    use_sliding_window=False,
)

# name -> (config.json fields, published parameter count in billions)
ARCHITECTURES: dict[str, tuple[dict[str, Any], float]] = {
    "Qwen/Qwen3-0.6B": (
        {
            **_QWEN3,
            "hidden_size": 1024,
            "intermediate_size": 3072,
            "num_hidden_layers": 28,
            "num_attention_heads": 16,
            "num_key_value_heads": 8,
            "tie_word_embeddings": True,
        },
        0.6,
    ),
    "Qwen/Qwen3-1.7B": (
        {
            **_QWEN3,
            "hidden_size": 2048,
            "intermediate_size": 6144,
            "num_hidden_layers": 28,
            "num_attention_heads": 16,
            "num_key_value_heads": 8,
            "tie_word_embeddings": True,
        },
        1.7,
    ),
    "Qwen/Qwen3-4B": (
        {
            **_QWEN3,
            "hidden_size": 2560,
            "intermediate_size": 9728,
            "num_hidden_layers": 36,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "tie_word_embeddings": True,
        },
        4.0,
    ),
    "Qwen/Qwen3-8B": (
        {
            **_QWEN3,
            "hidden_size": 4096,
            "intermediate_size": 12288,
            "num_hidden_layers": 36,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "tie_word_embeddings": False,
        },
        8.2,
    ),
    "Qwen/Qwen2.5-Math-1.5B": (
        {
            **_QWEN2,
            "hidden_size": 1536,
            "intermediate_size": 8960,
            "num_hidden_layers": 28,
            "num_attention_heads": 12,
            "num_key_value_heads": 2,
            "vocab_size": 151936,
            "max_position_embeddings": 4096,
            "rope_theta": 10000.0,
            "tie_word_embeddings": True,
        },
        1.54,
    ),
    # creditbench's fetched GGUF copy (bench.models.pretrained): the Hub original ties its embeddings
    # (0.49B on its card); the Q4_K_M GGUF keeps a separate output layer, so the copy trains 0.63B
    "qwen2.5-coder-0.5b-instruct": (
        {
            **_QWEN2,
            "hidden_size": 896,
            "intermediate_size": 4864,
            "num_hidden_layers": 24,
            "num_attention_heads": 14,
            "num_key_value_heads": 2,
            "vocab_size": 151936,
            "max_position_embeddings": 32768,
            "rope_theta": 1_000_000.0,
            "tie_word_embeddings": False,
            "eos_token_id": 151645,
        },
        0.63,
    ),
    "Qwen/Qwen2.5-Math-7B": (
        {
            **_QWEN2,
            "hidden_size": 3584,
            "intermediate_size": 18944,
            "num_hidden_layers": 28,
            "num_attention_heads": 28,
            "num_key_value_heads": 4,
            "vocab_size": 152064,
            "max_position_embeddings": 4096,
            "rope_theta": 10000.0,
            "tie_word_embeddings": False,
        },
        7.61,
    ),
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-7B": (
        {
            **_QWEN2,
            "hidden_size": 3584,
            "intermediate_size": 18944,
            "num_hidden_layers": 28,
            "num_attention_heads": 28,
            "num_key_value_heads": 4,
            "vocab_size": 152064,
            "max_position_embeddings": 131072,
            "rope_theta": 10000.0,
            "tie_word_embeddings": False,
            "eos_token_id": 151643,
        },
        7.61,
    ),
    "meta-llama/Llama-3.1-8B": (
        {
            "model_type": "llama",
            "hidden_size": 4096,
            "intermediate_size": 14336,
            "num_hidden_layers": 32,
            "num_attention_heads": 32,
            "num_key_value_heads": 8,
            "vocab_size": 128256,
            "max_position_embeddings": 131072,
            "rope_theta": 500000.0,
            "rms_norm_eps": 1e-5,
            "hidden_act": "silu",
            "tie_word_embeddings": False,
            "bos_token_id": 128000,
            "eos_token_id": 128001,
            "rope_scaling": {
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 1.0,
                "high_freq_factor": 4.0,
                "original_max_position_embeddings": 8192,
            },
        },
        8.03,
    ),
}
# Post-trained and base checkpoints share their architecture.
for _base, _variants in {
    "Qwen/Qwen3-0.6B": ["Qwen/Qwen3-0.6B-Base"],
    "Qwen/Qwen3-1.7B": ["Qwen/Qwen3-1.7B-Base"],
    "Qwen/Qwen3-4B": ["Qwen/Qwen3-4B-Base"],
    "Qwen/Qwen3-8B": ["Qwen/Qwen3-8B-Base"],
    "meta-llama/Llama-3.1-8B": ["meta-llama/Llama-3.1-8B-Instruct"],
}.items():
    for _v in _variants:
        ARCHITECTURES[_v] = ARCHITECTURES[_base]


def architecture(name: str, **overrides: Any):
    """The transformers config of ``name``: from the table above, else ``AutoConfig.from_pretrained``;
    ``overrides`` replace its fields."""
    from transformers import AutoConfig

    if name in ARCHITECTURES:
        fields = {**ARCHITECTURES[name][0], **overrides}
        return AutoConfig.for_model(fields.pop("model_type"), **fields)
    try:
        return AutoConfig.from_pretrained(name, **overrides)
    except (OSError, ValueError) as e:
        raise CreditBenchError(
            f"no architecture known for {name!r} ({str(e).splitlines()[0]}); known without "
            f"the Hub: {', '.join(sorted(ARCHITECTURES))}"
        ) from None


def meta_model(name: str, dtype: str = "bfloat16"):
    """``name``'s causal LM on the meta device: the real module tree and shapes, no storage."""
    import torch
    from transformers import AutoModelForCausalLM

    config = architecture(name)
    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))


def filler_tokenizer(vocab_size: int):
    """A tokenizer with exactly ``vocab_size`` entries: the character tokenizer's, then filler
    tokens, so a randomly initialised model's samples decode (to text the verifiers reject)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    from bench.models.policy import CHARS, SPECIAL_TOKENS

    vocab = {t: i for i, t in enumerate(SPECIAL_TOKENS + CHARS)}
    vocab.update({f"<t{i}>": i for i in range(len(vocab), vocab_size)})
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", unk_token="<unk>", padding_side="left"
    )


def random_checkpoint(
    name: str,
    out: str | Path,
    dtype: str = "bfloat16",
    seed: int = 0,
    max_positions: int | None = None,
    device: str = "cpu",
    **overrides: Any,
) -> Path:
    """Save a randomly initialised model of ``name``'s architecture (and a tokenizer of its
    vocabulary size) to ``out``, loadable with ``from_pretrained`` (and by vLLM). ``overrides``
    replace config fields (e.g. ``num_hidden_layers=2`` for a cut-down copy); ``device``: where its
    weights are drawn (a GPU draws a 1.7B model's in a fraction of the CPU's time)."""
    import torch
    from transformers import AutoModelForCausalLM

    out = Path(out)
    config = architecture(name, **overrides)
    tokenizer = filler_tokenizer(config.vocab_size)
    config.pad_token_id, config.eos_token_id, config.bos_token_id = (
        tokenizer.pad_token_id,
        tokenizer.eos_token_id,
        None,
    )
    if max_positions:
        config.max_position_embeddings = max_positions
    torch.manual_seed(seed)
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, dtype))
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    return out


def published_params(name: str) -> float | None:
    """The parameter count (billions) on ``name``'s model card, when the table knows it."""
    return ARCHITECTURES[name][1] if name in ARCHITECTURES else None
