"""The config must fit the checkpoint's own tensors, checked before any graph is built.

A config can claim a billion layers or a hidden size of 4e11 while the
weights hold two small layers. Only the tensor headers are read here (no
data): every layer count in config.json must be covered by the layer indices
in the tensor names, and every size by some tensor dimension. Exact shapes are
checked later, name by name, by attach_weights.
"""

from __future__ import annotations

import re
from typing import Any

from mobius.errors import ConfigError
from mobius.weights.safetensors_checkpoint import SafetensorsCheckpoint

#: config.json keys (at any depth: text_config, vision_config, ...) that count layers
LAYER_KEYS = frozenset({"num_hidden_layers", "n_layer", "num_layers", "encoder_layers",
                        "decoder_layers"})
#: keys that are the size of some weight dimension
SIZE_KEYS = frozenset({"hidden_size", "intermediate_size", "vocab_size", "n_embd", "n_inner",
                       "d_model", "encoder_ffn_dim", "decoder_ffn_dim", "num_mel_bins",
                       "moe_intermediate_size", "shared_expert_intermediate_size",
                       "num_local_experts", "num_experts", "type_vocab_size"})
_INDEX = re.compile(r"(?:^|\.)(\d+)(?=\.|$)")


def check_config_fits_checkpoint(raw: dict[str, Any], checkpoint: SafetensorsCheckpoint) -> None:
    """Raises ConfigError naming the first config.json field the tensors cannot back."""
    names = checkpoint.names()
    layers = 1 + max((int(m) for n in names for m in _INDEX.findall(n)), default=-1)
    largest = max((d for n in names for d in checkpoint.info(n).shape), default=1)
    stack = [("", raw)]
    while stack:
        path, value = stack.pop()
        if isinstance(value, dict):
            stack.extend((f"{path}.{k}" if path else str(k), v) for k, v in value.items())
            continue
        key = path.rsplit(".", 1)[-1]
        if isinstance(value, bool) or not isinstance(value, int):
            continue
        if key in LAYER_KEYS and value > layers:
            raise ConfigError(f"config.json: {path!r} is {value} but the checkpoint's tensor "
                              f"names cover {layers} layers")
        if key in SIZE_KEYS and value > largest:
            raise ConfigError(f"config.json: {path!r} is {value}, larger than every tensor "
                              f"dimension in the checkpoint (at most {largest})")
