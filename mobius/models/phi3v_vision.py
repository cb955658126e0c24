"""Phi-3-vision's image path (``model.vision_embed_tokens``), as the vision model
onnxruntime-genai's ``phi3v`` pipeline runs: its processor's HD crops go in, every
image's tokens come out, in prompt order.

Inputs (what genai's phi3v processor feeds): pixel_values [images, crops, C, S, S]
(crop 0 the global view, then the h x w sub-crops row-major, zero crops padding up
to the processor's ``num_crops`` + 1) and image_sizes [images, 2] (the HD canvas
height, width: multiples of S).

Per crop, a CLIP tower (``img_processor``, transformers' CLIPVisionModel layout)
read at hidden state ``layer_idx`` without the class token (``type_feature``
"patch"); each 2 x 2 block of patches is merged into one 4C feature. Per image
(``hd_transform_order`` "sub_glb"): the sub-crops tiled into an (h B) x (w B) grid
whose every row ends with ``sub_GN``, then ``glb_GN``, then the global crop's B x B
grid, each row ending with ``sub_GN`` too (B = S / patch / 2). The tiling is one
Gather over index arithmetic, so images with different crop grids run in one call.
Then ``img_projection`` (Linear 4C -> text hidden, exact GELU, Linear) ->
image_features [tokens, text hidden].
"""

from __future__ import annotations

import onnx_ir as ir
from onnxscript import nn

from mobius.components.linear import Linear
from mobius.components.weight import Weight
from mobius.models.clip import CLIPVisionConfig, CLIPVisionModel

I64 = ir.DataType.INT64


def _ints(op, *values):
    return op.Constant(value_ints=list(values))


def _i64(op, value: int):
    return op.Constant(value_int=value)


class _Gelu(nn.Module):
    """``img_projection.1``: exact GELU (no parameters)."""

    def forward(self, op, x):
        return op.Gelu(x)


def projection(in_features: int, hidden: int) -> nn.ModuleList:
    """``img_projection`` as the checkpoint numbers it (0: Linear, 1: GELU, 2: Linear)."""
    return nn.ModuleList([Linear(in_features, hidden, True), _Gelu(), Linear(hidden, hidden, True)])


class Phi3VImageEmbedding(nn.Module):
    """``vision_embed_tokens``: tower, 2 x 2 merge, HD tiling with separators, projection."""

    def __init__(self, clip: CLIPVisionConfig, feature_state: int, text_hidden: int):
        super().__init__()
        self.clip, self.feature_state = clip, feature_state
        side = clip.image_size // clip.patch_size
        self.side, self.base = side, side // 2
        dim = 4 * clip.hidden_size
        self.img_processor = CLIPVisionModel(clip, num_layers=feature_state)
        self.glb_GN = Weight([1, dim], checkpoint_shape=[1, 1, dim],
                             transform=lambda a: a.reshape(1, -1))
        self.sub_GN = Weight([1, dim], checkpoint_shape=[1, 1, 1, dim],
                             transform=lambda a: a.reshape(1, -1))
        self.img_projection = projection(dim, text_hidden)

    def forward(self, op, pixel_values, image_sizes):
        clip, base = self.clip, self.base
        size, channels = clip.image_size, clip.hidden_size
        pixels = op.Reshape(pixel_values, _ints(op, -1, clip.num_channels, size, size))
        hidden = self.img_processor(op, pixels)[self.feature_state]  # [N, 1 + side^2, C]
        patches = op.Slice(hidden, _ints(op, 1), _ints(op, 2**62), _ints(op, 1))
        blocks = op.Reshape(patches, _ints(op, -1, base, 2, base, 2, channels))
        merged = op.Reshape(op.Transpose(blocks, perm=[0, 1, 3, 2, 4, 5]),
                            _ints(op, -1, 4 * channels))  # [N * base^2, 4C]
        table = op.Concat(merged, self.sub_GN, self.glb_GN, axis=0)
        tokens = op.Gather(table, self._token_rows(op, pixel_values, image_sizes), axis=0)
        for layer in self.img_projection:
            tokens = layer(op, tokens)
        return tokens

    def _token_rows(self, op, pixel_values, image_sizes):
        """The row of [merged features..., sub_GN, glb_GN] each output token reads."""
        base = self.base
        grid = op.Div(image_sizes, _i64(op, self.clip.image_size))
        h = op.Gather(grid, _i64(op, 0), axis=1)
        w = op.Gather(grid, _i64(op, 1), axis=1)
        width = op.Add(op.Mul(w, _i64(op, base)), _i64(op, 1))  # a sub row, sub_GN last
        sub_count = op.Mul(op.Mul(h, _i64(op, base)), width)
        counts = op.Add(sub_count, _i64(op, 1 + base * (base + 1)))
        ends = op.CumSum(counts, _i64(op, 0))
        token = op.Range(_i64(op, 0), op.ReduceSum(counts, keepdims=0), _i64(op, 1))
        image = op.ReduceSum(op.Cast(op.GreaterOrEqual(op.Unsqueeze(token, _ints(op, 1)),
                                                       op.Unsqueeze(ends, _ints(op, 0))),
                                     to=I64), _ints(op, 1), keepdims=0)
        local = op.Sub(token, op.Sub(op.Gather(ends, image), op.Gather(counts, image)))
        w, width, sub_count = (op.Gather(x, image) for x in (w, width, sub_count))
        crops = op.Squeeze(op.Shape(pixel_values, start=1, end=2))
        images = op.Squeeze(op.Shape(pixel_values, start=0, end=1))
        sub_gn = op.Mul(op.Mul(images, crops), _i64(op, base * base))
        glb_gn = op.Add(sub_gn, _i64(op, 1))
        first = op.Mul(op.Mul(image, crops), _i64(op, base * base))  # the global crop's row

        r, c = op.Div(local, width), op.Mod(local, width)
        crop = op.Add(op.Add(op.Mul(op.Div(r, _i64(op, base)), w), op.Div(c, _i64(op, base))),
                      _i64(op, 1))
        pos = op.Add(op.Mul(op.Mod(r, _i64(op, base)), _i64(op, base)), op.Mod(c, _i64(op, base)))
        in_sub = op.Where(op.Equal(c, op.Sub(width, _i64(op, 1))), sub_gn,
                          op.Add(first, op.Add(op.Mul(crop, _i64(op, base * base)), pos)))

        g = op.Sub(local, op.Add(sub_count, _i64(op, 1)))  # global rows, sub_GN last
        gr, gc = op.Div(g, _i64(op, base + 1)), op.Mod(g, _i64(op, base + 1))
        in_global = op.Where(op.Equal(gc, _i64(op, base)), sub_gn,
                             op.Add(first, op.Add(op.Mul(gr, _i64(op, base)), gc)))
        rest = op.Where(op.Equal(local, sub_count), glb_gn, in_global)
        return op.Where(op.Less(local, sub_count), in_sub, rest)


def token_count(height: int, width: int, crop: int, base: int) -> int:
    """An image's token count for an HD canvas of height x width pixels."""
    h, w = height // crop, width // crop
    return h * base * (w * base + 1) + 1 + base * (base + 1)
