"""What the real-EP tests (ep/<name>/<name>_real_test.py) share: a step's feeds, the
tolerance against the CPU EP, and a package's CPU-EP twin for onnxruntime-genai."""

from __future__ import annotations

import json
import shutil

import numpy as np

from testing.ep_parity import F32_ATOL, HALF_ULPS, spacing

PAST, NEW = 3, 4  # cache slots already filled, tokens in the step
#: a vision tower's image: one, of 2 x 2 patches (Qwen2.5-VL's grid is [t, h, w])
_IMAGE = {"num_images": 1, "num_patches": 4}
_NUMPY = {"tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(float)": np.float32,
          "tensor(float16)": np.float16}


def feeds(inputs) -> dict[str, np.ndarray]:
    """A step with PAST cached slots and NEW tokens (a static graph's own counts), random
    cache, every mask slot on, for onnxruntime's ``session.get_inputs()``."""
    rng = np.random.default_rng(0)
    dims = {"batch_size": 1, "sequence_length": NEW, "past_sequence_length": PAST,
            "total_sequence_length": PAST + NEW, **_IMAGE}
    shapes = {arg.name: [d if isinstance(d, int) else dims.get(d, 1 if "batch" in d else NEW)
                         for d in arg.shape] for arg in inputs}
    static = [a.shape[-1] for a in inputs if a.name == "attention_mask" and isinstance(a.shape[-1], int)]
    total = static[0] if static else PAST + NEW  # a static decoder's own total
    out = {}
    for arg in inputs:
        shape = shapes[arg.name]
        kind = _NUMPY[arg.type]
        if "mask" in arg.name:
            out[arg.name] = np.ones(shape, kind)
        elif "token_type" in arg.name:
            out[arg.name] = np.zeros(shape, kind)
        elif "position" in arg.name:
            out[arg.name] = np.broadcast_to(np.arange(total - shape[-1], total, dtype=kind),
                                            shape).copy()
        elif "grid_thw" in arg.name:
            out[arg.name] = np.array([[1, 2, 2]], kind)
        elif np.issubdtype(kind, np.integer):
            out[arg.name] = rng.integers(1, 50, shape).astype(kind)
        else:
            out[arg.name] = rng.standard_normal(shape).astype(kind)
    return out


def tolerance(dtype: str, reference: np.ndarray) -> float:
    """testing/ep_parity's: F32_ATOL for f32; HALF_ULPS spacings at the tensor's largest
    magnitude for f16."""
    if dtype == "f32":
        return F32_ATOL
    return HALF_ULPS * spacing(float(np.abs(reference.astype(np.float32)).max()), dtype)


def on_cpu(package: str, copy: str) -> str:
    """A copy of ``package`` whose genai_config names no provider (genai's CPU EP)."""
    shutil.copytree(package, copy)
    with open(f"{copy}/genai_config.json") as f:
        config = json.load(f)
    config["model"]["decoder"]["session_options"]["provider_options"] = []
    with open(f"{copy}/genai_config.json", "w") as f:
        json.dump(config, f)
    return copy
