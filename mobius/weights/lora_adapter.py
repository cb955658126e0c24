"""A PEFT LoRA adapter kept apart from the base weights (``--adapter-mode separate``).

The base graph computes ``y = x @ W + (x @ A) @ B`` for every targeted Linear,
with A [in, r] and B [r, out] as graph inputs (mobius/tasks/lora_inputs.py);
an adapter supplies A = lora_A^T and B = scale * lora_B^T, so switching
adapters at run time swaps two small tensors per Linear and no weight.
"""

from __future__ import annotations

import os

import numpy as np

from mobius.errors import WeightsError
from mobius.weights.lora import lora_scale, pair_tensors, read_config
from mobius.weights.safetensors_checkpoint import SafetensorsCheckpoint


class LoraAdapter:
    """One adapter folder checked against the base checkpoint."""

    def __init__(self, folder: str, base: SafetensorsCheckpoint, name: str | None = None):
        self.name = name or os.path.basename(os.path.normpath(folder))
        if not self.name.replace("-", "").replace("_", "").replace(".", "").isalnum():
            raise WeightsError(f"adapter name {self.name!r}: use letters, digits, '-', '_', '.'")
        config = read_config(folder)
        self.rank, self.scale = int(config["r"]), lora_scale(config)
        self.tensors = SafetensorsCheckpoint(folder)
        self.pairs = pair_tensors(self.tensors, base)  # base weight -> (A name, B name)
        self.shapes = {weight: tuple(base.info(weight).shape) for weight in self.pairs}

    def targets(self) -> dict[str, tuple[int, int]]:
        """Targeted base weight -> (in_features, out_features)."""
        return {weight: (shape[1], shape[0]) for weight, shape in self.shapes.items()}

    def matrices(self, weight: str, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
        """(A [in, r], B [r, out]) for ``weight``; empty (rank 0) where the adapter
        does not target it, which adds nothing."""
        if weight not in self.pairs:
            raise KeyError(weight)
        a_name, b_name = self.pairs[weight]
        a = np.asarray(self.tensors.read(a_name), np.float32)
        b = np.asarray(self.tensors.read(b_name), np.float32)
        return (np.ascontiguousarray(a.T).astype(dtype),
                np.ascontiguousarray(self.scale * b.T).astype(dtype))


def union_targets(adapters: list[LoraAdapter]) -> dict[str, tuple[int, int]]:
    """Every weight some adapter targets, with its (in, out) features."""
    names = [a.name for a in adapters]
    if len(set(names)) != len(names):
        raise WeightsError(f"two adapters share a name: {sorted(names)}")
    targets: dict[str, tuple[int, int]] = {}
    for adapter in adapters:
        targets.update(adapter.targets())
    return dict(sorted(targets.items()))
