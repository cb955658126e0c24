"""Gemma 4 Unified's encoder-free image embedder: no tower.

The image processor merges each ``pooling_kernel_size``^2 block of patches into one
model patch, so pixel_values are [images, patches, 3 * (patch_size * kernel)^2] in
[0, 1] with each model patch's (x, y) in pixel_position_ids ((-1, -1): padding). Each
model patch is one soft token: LayerNorm -> ``patch_dense`` -> LayerNorm, plus the x
row and y row of ``pos_embedding`` [mm_posemb_size, 2, mm_embed_dim] (an axis at -1
adds nothing), LayerNorm (``model.vision_embedder``, as transformers saves it), then
Gemma 4's embedder (``model.embed_vision``: scale-free RMSNorm, projection to the text
width). The padding patches' tokens are dropped.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components.causal_transformer import scalar
from mobius.components.layer_norm import LayerNorm
from mobius.components.linear import Linear
from mobius.components.weight import Weight
from mobius.config.options import read_options
from mobius.errors import ConfigError
from mobius.models.gemma4_vision import Gemma4MultimodalEmbedder


@dataclasses.dataclass(frozen=True)
class Gemma4UnifiedVisionOptions:
    """vision_config, with transformers' Gemma4UnifiedVisionConfig defaults."""

    patch_size: int = 16
    pooling_kernel_size: int = 3
    mm_embed_dim: int = 3840
    mm_posemb_size: int = 1120
    rms_norm_eps: float = 1e-6
    output_proj_dims: int = 3840

    @property
    def model_patch_size(self) -> int:
        return self.patch_size * self.pooling_kernel_size


def unified_vision_options(raw: dict | None) -> Gemma4UnifiedVisionOptions:
    """The checked vision_config: the embedder's norm runs on mm_embed_dim, so
    output_proj_dims must equal it (transformers cannot run other values)."""
    if not isinstance(raw, dict):
        raise ConfigError("config.json: gemma4_unified: vision_config (the image embedder) "
                          "is missing")
    options = read_options(Gemma4UnifiedVisionOptions, raw)
    if options.output_proj_dims != options.mm_embed_dim:
        raise ConfigError(f"config.json: gemma4_unified: vision_config output_proj_dims "
                          f"{options.output_proj_dims} differs from mm_embed_dim "
                          f"{options.mm_embed_dim}: not supported")
    return options


class Gemma4UnifiedVisionEmbedder(nn.Module):
    """pixel_values, pixel_position_ids -> [images, patches, mm_embed_dim]."""

    def __init__(self, options: Gemma4UnifiedVisionOptions):
        super().__init__()
        size, width = 3 * options.model_patch_size**2, options.mm_embed_dim
        self.patch_ln1 = LayerNorm(size)
        self.patch_dense = Linear(size, width, bias=True)
        self.patch_ln2 = LayerNorm(width)
        self.pos_embedding = Weight([options.mm_posemb_size, 2, width])
        self.pos_norm = LayerNorm(width)

    def _positions(self, op, positions):
        """sum over the axes of pos_embedding[p_axis, axis], 0 where p_axis is -1."""
        zero = op.Constant(value=ir.tensor(np.array(0, np.int64)))
        rows = []
        for axis in (0, 1):
            index = op.Gather(positions, op.Constant(value_int=axis), axis=2)
            table = op.Gather(self.pos_embedding, op.Constant(value_int=axis), axis=1)
            row = op.Gather(table, op.Max(index, zero))
            missing = op.Unsqueeze(op.Equal(index, op.Constant(value_int=-1)),
                                   op.Constant(value_ints=[-1]))
            rows.append(op.Where(missing, scalar(op, 0.0), row))
        return op.Add(*rows)

    def forward(self, op, pixel_values, positions):
        hidden = self.patch_ln2(op, self.patch_dense(op, self.patch_ln1(op, pixel_values)))
        return self.pos_norm(op, op.Add(hidden, self._positions(op, positions)))


class Gemma4UnifiedVision(nn.Module):
    """``vision_embedder`` and ``embed_vision``: the real patches' tokens [tokens, text
    hidden]."""

    def __init__(self, options: Gemma4UnifiedVisionOptions, text_hidden: int):
        super().__init__()
        self.options, self.text_hidden = options, text_hidden
        self.vision_embedder = Gemma4UnifiedVisionEmbedder(options)
        self.embed_vision = Gemma4MultimodalEmbedder(options.mm_embed_dim, text_hidden,
                                                     options.rms_norm_eps)

    def forward(self, op, pixel_values, positions):
        tokens = self.embed_vision(op, self.vision_embedder(op, pixel_values, positions))
        padded = op.ReduceMax(op.Cast(op.Equal(positions, op.Constant(value_int=-1)),
                                      to=ir.DataType.INT64),
                              op.Constant(value_ints=[-1]), keepdims=0)
        real = op.Not(op.Cast(op.Reshape(padded, op.Constant(value_ints=[-1])),
                              to=ir.DataType.BOOL))
        flat = op.Reshape(tokens, op.Constant(value_ints=[-1, self.text_hidden]))
        kept = op.Squeeze(op.NonZero(real), op.Constant(value_ints=[0]))  # Compress lacks bf16
        return op.Gather(flat, kept, axis=0)
