"""onnxruntime-genai's image processor for Gemma 4 Unified packages (processor_config.json).

transformers' Gemma4UnifiedImageProcessor resizes an image (bicubic, aspect kept) to at
most ``max_soft_tokens`` tiles of ``patch_size * pooling_kernel_size`` pixels a side,
rescales it to [0, 1], cuts ``patch_size`` patches and merges each kernel^2 block of them
into one model patch in raster order, with the block's (x, y) as its position. That is
one plain tile of the merged size per soft token, which genai 0.18's Gemma4ImageTransform
makes when given the merged size as ``patch_size`` and a kernel of 1 (its soft-token
count is then the real tiles'). genai resizes in float without transformers' rounding to
8 bits: its pixel values differ from transformers' by about one level (1 / 255).

What genai's transform cannot do (no resize, another resampling, another rescale, a
normalization that is not the identity) is refused, as are a geometry other than the
vision_config's and a soft-token budget transformers refuses.
"""

from __future__ import annotations

import math
from typing import Any, Mapping

from mobius.errors import ConfigError
from mobius.models.gemma4_unified_vision import Gemma4UnifiedVisionOptions

#: the budgets transformers' processor accepts, and its default
SOFT_TOKENS, DEFAULT_SOFT_TOKENS = (70, 140, 280, 560, 1120), 280
BICUBIC = 3  #: PIL's resample code, as the processor stores it
#: preprocessor_config.json switches genai's transform fixes: key -> (its value, why)
_FIXED = {"do_resize": (True, "genai always resizes"),
          "resample": (BICUBIC, "genai resizes bicubic"),
          "do_rescale": (True, "genai always rescales to [0, 1]")}


def _check(preprocessor: Mapping[str, Any]) -> None:
    """Refuse the switches genai's transform cannot follow."""
    for key, (value, why) in _FIXED.items():
        if preprocessor.get(key, value) != value:
            raise ConfigError(f"preprocessor_config.json: gemma4_unified: {key} "
                              f"{preprocessor[key]!r} is not supported ({why})")
    factor = preprocessor.get("rescale_factor", 1 / 255)
    if not isinstance(factor, (int, float)) or not math.isclose(factor, 1 / 255):
        raise ConfigError(f"preprocessor_config.json: gemma4_unified: rescale_factor "
                          f"{factor!r} is not supported (genai rescales by 1 / 255)")
    if preprocessor.get("do_normalize", False):
        mean, std = preprocessor.get("image_mean"), preprocessor.get("image_std")
        if mean != [0.0] * 3 or std != [1.0] * 3:
            raise ConfigError(f"preprocessor_config.json: gemma4_unified: normalization "
                              f"(image_mean {mean}, image_std {std}) is not supported "
                              f"(genai's transform does not normalize)")


def _side(preprocessor: Mapping[str, Any], vision: Gemma4UnifiedVisionOptions) -> int:
    """The merged tile's side: the processor's patch x kernel, which must be the model's."""
    patch = preprocessor.get("patch_size", vision.patch_size)
    kernel = preprocessor.get("pooling_kernel_size", vision.pooling_kernel_size)
    if not all(isinstance(v, int) and v > 0 for v in (patch, kernel)) or (
            patch * kernel != vision.model_patch_size):
        raise ConfigError(f"preprocessor_config.json: gemma4_unified: patch_size {patch!r} x "
                          f"pooling_kernel_size {kernel!r} differs from vision_config's "
                          f"merged patch ({vision.model_patch_size} px)")
    return vision.model_patch_size


def image_transform_attrs(preprocessor: Mapping[str, Any],
                          vision: Gemma4UnifiedVisionOptions) -> dict[str, int]:
    """Gemma4ImageTransform's attributes for the checkpoint's preprocessor_config.json
    ({} where it has none: transformers' defaults at the vision_config's geometry)."""
    _check(preprocessor)
    budget = preprocessor.get("max_soft_tokens", DEFAULT_SOFT_TOKENS)
    if type(budget) is not int or budget not in SOFT_TOKENS:
        raise ConfigError(f"preprocessor_config.json: gemma4_unified: max_soft_tokens "
                          f"{budget!r} is not one of transformers' {SOFT_TOKENS}")
    return {"patch_size": _side(preprocessor, vision), "max_soft_tokens": budget,
            "pooling_kernel_size": 1}
