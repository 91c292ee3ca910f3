"""Example model factory: a Hugging Face ``transformers`` causal LM, random weights.

``[model] factory = "trainer.examples.hf_causal_lm:build"``. The architecture comes from
``[model.options]`` (``model_type`` = llama, gpt2, mistral, qwen2, ...; any config key of
that model) with sizes defaulting to ``[model]`` (d_model, n_layers, n_heads, seq_len). The
weights are initialized from the config: nothing is downloaded (``HF_HUB_OFFLINE=1``). To
fine-tune, write your own factory that loads weights from local disk the same way.
Needs the ``hf`` extra (``pip install 'spotwise[hf]'``).
"""

from __future__ import annotations

import os
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from trainer.config import ConfigError, TrainerConfig
from trainer.parallel import shard_units


class CausalLM(nn.Module):
    """Adapts an HF model to the trainer's contract: ``(x, y) -> loss``; blocks = its layers."""

    def __init__(self, lm: nn.Module) -> None:
        super().__init__()
        self.lm = lm

    def shard_units(self) -> list[nn.Module]:
        return shard_units(self.lm)  # the decoder layers (model.layers, transformer.h, ...)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        logits = self.lm(input_ids=x).logits
        return F.cross_entropy(logits.float().reshape(-1, logits.size(-1)), y.reshape(-1))


def hf_config(cfg: TrainerConfig, vocab_size: int) -> Any:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # belt and braces: never fetch at run time
    try:
        import transformers
    except ImportError:
        raise ConfigError(
            "model.factory trainer.examples.hf_causal_lm:build needs transformers "
            "(pip install 'spotwise[hf]')"
        ) from None
    m = cfg.model
    options = dict(m.options)
    model_type = options.pop("model_type", "llama")
    sizes = {
        "hidden_size": m.d_model,
        "num_hidden_layers": m.n_layers,
        "num_attention_heads": m.n_heads,
        "max_position_embeddings": m.seq_len,
    }
    if model_type == "gpt2":  # its defaults (50256) lie outside a small vocabulary
        sizes["bos_token_id"] = sizes["eos_token_id"] = 0
    else:
        sizes["intermediate_size"] = 4 * m.d_model
        sizes["num_key_value_heads"] = m.n_heads
    try:
        return transformers.AutoConfig.for_model(
            model_type, vocab_size=vocab_size, **{**sizes, **options}
        )
    except (ValueError, TypeError) as e:
        raise ConfigError(f"model.options: {e}") from None


def build(cfg: TrainerConfig, dataset: object) -> CausalLM:
    vocab = int(getattr(dataset, "vocab_size", 0) or cfg.data.vocab_size)
    if vocab < 1:
        raise ConfigError("the dataset has no vocab_size attribute and data.vocab_size is 0")
    config = hf_config(cfg, vocab)
    import transformers

    return CausalLM(transformers.AutoModelForCausalLM.from_config(config))
