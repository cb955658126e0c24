"""A random multi-token-prediction head added to a tiny checkpoint.

transformers does not load (or write) MTP tensors, so they are added to the checkpoint
it saved, every one random: Qwen 3.5's ``mtp.*`` (the head's own tensors and one decoder
layer shaped like the checkpoint's attention layer, ``mtp_num_hidden_layers`` in
config.json) or DeepSeek-V3's / GLM-4.5's MTP layer ``model.layers.{num_hidden_layers}``
(a decoder layer shaped like the last one plus enorm, hnorm, eh_proj, shared_head and,
as DeepSeek-V3 ships it, embed_tokens; ``num_nextn_predict_layers`` in config.json).
"""

from __future__ import annotations

import json
import os

import numpy as np
from safetensors.numpy import load_file, save_file

#: the head's own tensors besides its decoder layer (mtp.layers.0.*)
HEAD_TENSORS = ("mtp.fc.weight", "mtp.norm.weight", "mtp.pre_fc_norm_embedding.weight",
                "mtp.pre_fc_norm_hidden.weight")


def add_mtp_head(folder: str, attention_layer: str, seed: int = 3) -> None:
    """Adds the head to ``folder``'s model.safetensors; ``attention_layer``: the prefix of
    the decoder's full-attention layer whose shapes the head's layer takes."""
    path = os.path.join(folder, "model.safetensors")
    tensors = load_file(path)
    hidden = tensors["model.norm.weight"].shape[0]
    shapes = {name: (hidden, 2 * hidden) if name == "mtp.fc.weight" else (hidden,)
              for name in HEAD_TENSORS}
    shapes.update({"mtp.layers.0." + name[len(attention_layer):]: value.shape
                   for name, value in tensors.items() if name.startswith(attention_layer)})
    rng = np.random.default_rng(seed)
    for name, shape in shapes.items():
        scale = 0.3 if len(shape) == 2 else 0.1  # norms scale by (1 + w): w small
        tensors[name] = (scale * rng.standard_normal(shape)).astype(np.float32)
    save_file(tensors, path, metadata={"format": "pt"})
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    config["mtp_num_hidden_layers"] = 1
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=2)


def add_nextn_layer(folder: str, embed_copy: bool, seed: int = 3) -> str:
    """Adds DeepSeek-V3's MTP layer to ``folder``'s model.safetensors: the last decoder
    layer's tensors plus N(0, 0.1) noise under the next index, and the module's own ones;
    ``embed_copy``: with its own embed_tokens (random, so that reading the decoder's
    instead shows). Returns the layer's prefix."""
    path = os.path.join(folder, "model.safetensors")
    tensors = load_file(path)
    with open(os.path.join(folder, "config.json")) as f:
        config = json.load(f)
    last, layer = config["num_hidden_layers"] - 1, f"model.layers.{config['num_hidden_layers']}."
    rng = np.random.default_rng(seed)

    def noisy(base):
        return (base + 0.1 * rng.standard_normal(base.shape)).astype(np.float32)

    for name, value in sorted(tensors.items()):
        if name.startswith(f"model.layers.{last}."):
            tensors[layer + name.split(".", 3)[3]] = noisy(value)
    hidden, vocab = tensors["model.norm.weight"].shape[0], config["vocab_size"]
    own = {"enorm.weight": (hidden,), "hnorm.weight": (hidden,),
           "shared_head.norm.weight": (hidden,), "eh_proj.weight": (hidden, 2 * hidden),
           "shared_head.head.weight": (vocab, hidden)}
    if embed_copy:
        own["embed_tokens.weight"] = (vocab, hidden)
    for name, shape in own.items():
        tensors[layer + name] = noisy(np.ones(shape) if len(shape) == 1 else np.zeros(shape))
    save_file(tensors, path, metadata={"format": "pt"})
    config["num_nextn_predict_layers"] = 1
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    return layer
