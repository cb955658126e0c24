"""What ``mobius verify`` feeds both sides and how it judges one output."""

from __future__ import annotations

import dataclasses

from mobius.trial.package import Package
from mobius.trial.tolerances import against_f32

#: fixed inputs: short, varied, the same for every package
PROMPTS = ("The quick brown fox jumps over the lazy dog.", "Once upon a time there was",
           "ONNX Runtime runs models on many devices: 1, 2, 3!")
#: the built-in text a quantized package's quality change is measured on
QUALITY_TEXT = ("The river rose through the night, and by morning the old bridge was under "
                "water. People gathered on the hill to watch the current carry branches, "
                "fences and a small boat past the church, while the baker handed out bread.")


@dataclasses.dataclass
class Check:
    """One line of the report; ``passed`` None: informative only."""

    text: str
    passed: bool | None = None


def max_diff_check(name: str, diff: float, scale: float, package: Package,
                   inputs: int) -> Check:
    """The max |difference| of one output from transformers' (run in float32: the reference
    a low-precision package is held to), within the dtype's tolerance (float packages);
    a quantized package's is shown only: its quality check decides."""
    text = f"{name}: max |diff| {diff:.3g} over {inputs} inputs"
    if package.quant:
        return Check(text + f" ({package.quant} weights: see the quality change)")
    limit = against_f32(scale, package.dtype)
    return Check(text + f" (tolerance {limit:.3g}, {package.dtype})", diff <= limit)
