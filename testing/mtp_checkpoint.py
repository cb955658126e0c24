"""A random multi-token-prediction head added to a tiny Qwen 3.5 checkpoint.

transformers does not load (or write) the ``mtp.*`` tensors, so they are added to the
checkpoint it saved: the head's own tensors and one decoder layer shaped like the
checkpoint's attention layer, every one random, and ``mtp_num_hidden_layers`` in
config.json as released checkpoints declare it.
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
