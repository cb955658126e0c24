"""A PEFT LoRA adapter merged into the base weights while they stream (``--adapter``).

PEFT saves ``adapter_config.json`` and ``adapter_model.safetensors`` with
``<module>.lora_A.weight`` [r, in] and ``<module>.lora_B.weight`` [out, r]
under a ``base_model.model.`` prefix. The merged weight is
``W + scale * B @ A`` with ``scale = lora_alpha / r`` (``/ sqrt(r)`` for
rsLoRA), computed in float32 when the base weight is read and cast back to its
dtype. Adapter features that are not a plain low-rank delta on Linear weights
(DoRA, trained biases, fan-in-fan-out layers, saved whole modules) are
refused up front, before any graph is built.
"""

from __future__ import annotations

import math
import os

import numpy as np

from mobius.config.architecture import read_json
from mobius.errors import WeightsError
from mobius.weights.safetensors_checkpoint import SafetensorsCheckpoint, TensorInfo

CONFIG = "adapter_config.json"
_PREFIX = "base_model.model."
_A, _B = ".lora_A.weight", ".lora_B.weight"
#: adapter_config.json switches mobius cannot merge, with the value that is fine
_UNSUPPORTED = {"use_dora": False, "fan_in_fan_out": False, "bias": "none",
                "modules_to_save": None}


class LoraMergedCheckpoint:
    """``base`` with the adapter's deltas added to the weights it targets."""

    def __init__(self, base: SafetensorsCheckpoint, adapter_folder: str):
        self.base = base
        self.scale = lora_scale(read_config(adapter_folder))
        self.adapter = SafetensorsCheckpoint(adapter_folder)
        self.deltas = pair_tensors(self.adapter, base)

    def __contains__(self, name: str) -> bool:
        return name in self.base

    def names(self) -> list[str]:
        return self.base.names()

    def info(self, name: str) -> TensorInfo:
        return self.base.info(name)

    def is_stored_as_read(self, name: str) -> bool:
        """A weight the adapter targets is merged, not the base file's bytes."""
        return name not in self.deltas and self.base.is_stored_as_read(name)

    def read(self, name: str) -> np.ndarray:
        weight = self.base.read(name)
        if name not in self.deltas:
            return weight
        a_name, b_name = self.deltas[name]
        a = np.asarray(self.adapter.read(a_name), np.float32)
        b = np.asarray(self.adapter.read(b_name), np.float32)
        merged = np.asarray(weight, np.float32) + self.scale * (b @ a)
        return merged.astype(weight.dtype)


def lora_scale(config: dict) -> float:
    """The factor of ``B @ A``: lora_alpha / r, or / sqrt(r) for rsLoRA."""
    rank, alpha = config["r"], config["lora_alpha"]
    return alpha / (math.sqrt(rank) if config.get("use_rslora") else rank)


def read_config(folder: str) -> dict:
    path = os.path.join(folder, CONFIG)
    if not os.path.isfile(path):
        raise WeightsError(f"{folder}: no {CONFIG} (is this a PEFT adapter folder?)")
    config = read_json(path)
    if config.get("peft_type") != "LORA":
        raise WeightsError(f"adapter peft_type {config.get('peft_type')!r} is not LORA")
    for key, fine in _UNSUPPORTED.items():
        if config.get(key, fine) not in (fine, [], {}):
            raise WeightsError(f"adapter {key}={config[key]!r} is not supported "
                               f"(only plain LoRA deltas on Linear weights are merged)")
    rank, alpha = config.get("r"), config.get("lora_alpha")
    if not all(isinstance(v, (int, float)) and v > 0 for v in (rank, alpha)):
        raise WeightsError(f"adapter r={rank!r} / lora_alpha={alpha!r} must be positive numbers")
    if config.get("rank_pattern") or config.get("alpha_pattern"):
        raise WeightsError("adapter rank_pattern / alpha_pattern is not supported")
    return config


def pair_tensors(adapter: SafetensorsCheckpoint, base: SafetensorsCheckpoint) -> dict:
    """base weight name -> (lora_A name, lora_B name), checked against the base shapes."""
    pairs = {}
    for name in adapter.names():
        if not (name.startswith(_PREFIX) and name.endswith((_A, _B))):
            raise WeightsError(f"adapter tensor {name!r} is not a LoRA A/B weight")
        if not name.endswith(_A):
            continue
        module = name[len(_PREFIX):-len(_A)]
        target, b_name = module + ".weight", name[:-len(_A)] + _B
        if target not in base:
            raise WeightsError(f"adapter targets {target!r}, which the base checkpoint lacks")
        if b_name not in adapter:
            raise WeightsError(f"adapter has {name!r} but no {b_name!r}")
        a, b, w = adapter.info(name).shape, adapter.info(b_name).shape, base.info(target).shape
        if len(w) != 2 or len(a) != 2 or len(b) != 2 or (b[0], a[1]) != tuple(w) or a[0] != b[1]:
            raise WeightsError(f"adapter shapes A{list(a)} B{list(b)} do not fit "
                               f"{target} {list(w)}")
        pairs[target] = (name, b_name)
    if not pairs:
        raise WeightsError("adapter holds no LoRA weights")
    return pairs
