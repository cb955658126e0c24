"""Small GPTQ and AWQ checkpoints, packed here in the documented formats.

Written independently of mobius' readers: random float weights are quantized
by this module's own round-to-nearest, packed into the int32 words of each
format with per-slot shifts, and saved as real safetensors files next to a
config.json carrying ``quantization_config``. The exact float weights the
packed integers stand for are saved too, as a plain float checkpoint that
transformers loads as the reference.

GPTQ: qweight int32 [K / (32 / bits), N] (words along the input dim),
qzeros int32 [groups, N / (32 / bits)] (words along the output dim, stored as
zero - 1 in checkpoint_format "gptq", as is in "gptq_v2"), scales f16
[groups, N], g_idx int32 [K]. AWQ (GEMM): qweight int32 [K, N / 8] and qzeros
int32 [groups, N / 8], words along the output dim, slot i of a word holding
column ORDER[i] of its 8; scales f16 [groups, N].
"""

from __future__ import annotations

import dataclasses
import json
import os
import re

import numpy as np

AWQ_ORDER = (0, 2, 4, 6, 1, 3, 5, 7)
#: the Linears GPTQ / AWQ quantize in a Llama- or Phi-3-shaped decoder (lm_head stays float)
QUANTIZED = re.compile(r"\.(self_attn\.(q|k|v|o|qkv)_proj|mlp\.(gate|up|down|gate_up)_proj)$")


@dataclasses.dataclass(frozen=True)
class Quantized:
    """What one Linear's packed tensors stand for: codes [N, K], scales and zeros
    [N, groups], g_idx [K]; ``weight()`` is the exact float matrix [N, K]."""

    codes: np.ndarray
    scales: np.ndarray
    zeros: np.ndarray
    g_idx: np.ndarray

    def weight(self) -> np.ndarray:
        g = self.g_idx
        return ((self.codes.astype(np.float32) - self.zeros[:, g]) * self.scales[:, g])


def quantize(weight: np.ndarray, bits: int, group_size: int | None, sym: bool,
             order: np.ndarray | None = None) -> Quantized:
    """Round-to-nearest per group; ``order`` given: act-order (consecutive input
    channels of that permutation share a group). Scales are f16 values, as the
    checkpoint stores them."""
    n, k = weight.shape
    size = group_size or k
    order = np.arange(k) if order is None else order
    g_idx = np.empty(k, np.int32)
    g_idx[order] = np.arange(k) // size
    groups = -(-k // size)
    top = (1 << bits) - 1
    codes = np.empty((n, k), np.uint8)
    scales = np.empty((n, groups), np.float32)
    zeros = np.empty((n, groups), np.uint8)
    for g in range(groups):
        cols = np.flatnonzero(g_idx == g)
        block = weight[:, cols]
        if sym:
            zero = np.full(n, 1 << (bits - 1), np.float32)
            scale = np.abs(block).max(1) / (top - zero)
        else:
            lo, hi = np.minimum(block.min(1), 0), np.maximum(block.max(1), 0)
            scale = (hi - lo) / top
            zero = np.clip(np.round(-lo / scale), 0, top)
        scale = scale.astype(np.float16).astype(np.float32)
        codes[:, cols] = np.clip(np.round(block / scale[:, None]) + zero[:, None], 0, top)
        scales[:, g], zeros[:, g] = scale, zero
    return Quantized(codes, scales, zeros, g_idx)


def _pack(values: np.ndarray, bits: int, axis: int, slots=None) -> np.ndarray:
    """uint values -> int32 words along ``axis``; slot i of word j holds entry
    j * per + slots[i] of that axis."""
    per = 32 // bits
    slots = slots or tuple(range(per))
    values = np.moveaxis(values.astype(np.uint32), axis, 0)
    words = np.zeros((values.shape[0] // per, *values.shape[1:]), np.uint32)
    for i, slot in enumerate(slots):
        words |= values[slot::per] << np.uint32(bits * i)
    return np.ascontiguousarray(np.moveaxis(words, 0, axis)).view(np.int32)


def pack_gptq(q: Quantized, bits: int, zero_offset: int = 1) -> dict[str, np.ndarray]:
    stored = (q.zeros.astype(np.int64) - zero_offset) & ((1 << bits) - 1)
    return {"qweight": _pack(q.codes.T, bits, axis=0),
            "qzeros": _pack(stored.T, bits, axis=1),
            "scales": np.ascontiguousarray(q.scales.T, np.float16),
            "g_idx": q.g_idx.copy()}


def pack_awq(q: Quantized) -> dict[str, np.ndarray]:
    return {"qweight": _pack(q.codes.T, 4, axis=1, slots=AWQ_ORDER),
            "qzeros": _pack(q.zeros.T, 4, axis=1, slots=AWQ_ORDER),
            "scales": np.ascontiguousarray(q.scales.T, np.float16)}


def gptq_config(bits: int = 4, group_size: int | None = 32, sym: bool = True,
                desc_act: bool = False, checkpoint_format: str = "gptq") -> dict:
    return {"quant_method": "gptq", "bits": bits, "group_size": group_size or -1,
            "sym": sym, "desc_act": desc_act, "checkpoint_format": checkpoint_format,
            "damp_percent": 0.01, "true_sequential": True, "static_groups": False}


def awq_config(group_size: int = 32) -> dict:
    return {"quant_method": "awq", "bits": 4, "group_size": group_size, "zero_point": True,
            "version": "gemm", "modules_to_not_convert": None}


def write_prequantized(folder: str, reference: str, quantization_config: dict,
                       preset: str = "tiny-llama", seed: int = 0, **overrides) -> str:
    """A tiny ``preset`` checkpoint in ``folder`` with every Linear of the decoder
    layers packed per ``quantization_config`` (every other tensor random, f16),
    and in ``reference`` the same model with those Linears' exact float weights."""
    from safetensors.numpy import load_file, save_file

    from testing.hf_checkpoints import make_hf_checkpoint

    make_hf_checkpoint(reference, preset, seed=seed, **overrides)
    path = os.path.join(reference, "model.safetensors")
    rng = np.random.default_rng(seed)
    floats, packed, orders = {}, {}, {}
    for name, array in sorted(load_file(path).items()):
        base = name.rsplit(".", 1)[0]
        value = _random_like(name, array.shape, rng)
        if name.endswith(".weight") and QUANTIZED.search(base):
            # GPTQ's act-order follows the input's statistics: projections of one input share it
            shared = re.sub(r"(q|k|v)_proj$", "qkv", re.sub(r"(gate|up)_proj$", "gate_up", base))
            order = orders.setdefault(shared, rng.permutation(value.shape[1]))
            q = _quantize_for(value, quantization_config, order)
            floats[name] = q.weight()
            packed.update({f"{base}.{k}": v for k, v in _pack_for(q, quantization_config).items()})
        else:
            floats[name] = value.astype(np.float16).astype(np.float32)
            packed[name] = value.astype(np.float16)
    save_file(floats, path, metadata={"format": "pt"})
    os.makedirs(folder, exist_ok=True)
    save_file(packed, os.path.join(folder, "model.safetensors"), metadata={"format": "pt"})
    for file in os.listdir(reference):
        if file == "config.json":
            with open(os.path.join(reference, file)) as f:
                config = json.load(f)
            config["quantization_config"] = quantization_config
            config["torch_dtype"] = config["dtype"] = "float16"
            with open(os.path.join(folder, file), "w") as f:
                json.dump(config, f, indent=2)
        elif not file.endswith(".safetensors"):
            with open(os.path.join(reference, file), "rb") as src, \
                    open(os.path.join(folder, file), "wb") as dst:
                dst.write(src.read())
    return folder


def _random_like(name: str, shape, rng) -> np.ndarray:
    if re.search(r"norm\.weight$", name):
        return (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
    return (0.05 * rng.standard_normal(shape)).astype(np.float32)


def _quantize_for(weight: np.ndarray, config: dict, order: np.ndarray) -> Quantized:
    group = config["group_size"] if config["group_size"] > 0 else None
    sym = config.get("sym", not config.get("zero_point", True))
    return quantize(weight, config["bits"], group, sym, order if config.get("desc_act") else None)


def _pack_for(q: Quantized, config: dict) -> dict[str, np.ndarray]:
    if config["quant_method"] == "awq":
        return pack_awq(q)
    offset = 0 if config.get("checkpoint_format") == "gptq_v2" else 1
    return pack_gptq(q, config["bits"], offset)
