"""Phi-4-multimodal's image path (``model.embed_tokens_extend.image_embed``), as the
vision model onnxruntime-genai's phi4mm pipeline runs: the HD crops its processor
makes go in, the image tokens of every image come out, in prompt order.

Inputs (the names genai's phi4mm processor feeds):
  pixel_values [images, crops, C, S, S]: crop 0 the global view, then the sub-crops
  row-major, zero-padded to the batch's largest crop count; image_sizes [images, 2]
  (the HD canvas height, width: multiples of ``crop_size``); image_attention_mask
  [images, crops, S/p, S/p] (1 where a patch shows the image, not the padding).

Per crop, a SigLIP tower (``img_processor``) whose patch positions are rescaled to
the crop's valid patch extent (transformers' bucketized fractional coordinates) and
whose attention ignores padded patches; the hidden state ``feature_layer`` (no
post_layernorm), 2 x 2 average pooling (the grid reflection-padded first when odd)
-> B x B features per crop. Per image (h x w sub-crops, from image_sizes): the
sub-crops tiled into an (h B) x (w B) grid cut to its valid extent (read from the
mask) with ``sub_img_feature_extensor`` closing every row, then
``global_img_feature_extensor``, then the global crop's B rows, each closed the same
way. The tiling is one Gather over index arithmetic, so any number of images with
different crop grids runs in one call. Then img_projection_up, exact GELU,
img_projection_down -> image_features [tokens, text hidden].
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnxscript import nn

from mobius.components.linear import Linear
from mobius.components.weight import Weight
from mobius.models.clip import CLIPEncoderLayer, CLIPVisionConfig, _Table
from mobius.models.vision_parts import PatchConv

F32, I64 = ir.DataType.FLOAT, ir.DataType.INT64


def _ints(op, *values):
    return op.Constant(value_ints=list(values))


def _i64(op, value: int):
    return op.Constant(value_int=value)


def _f32(op, value: float):
    return op.Constant(value_float=value)


class Phi4VisionTower(nn.Module):
    """``img_processor``: SigLIP with mask-aware positions and attention, built up to
    the hidden state it is read at (``layers`` encoder layers)."""

    def __init__(self, vision: CLIPVisionConfig, layers: int):
        super().__init__()
        self.side = vision.image_size // vision.patch_size
        self.embeddings = _Embeddings(vision)
        self.encoder = _Encoder(vision, layers)

    def forward(self, op, pixels, mask):
        """pixels [N, C, S, S], mask [N, side, side] (float 0/1) -> [N, side^2, hidden]."""
        valid = op.Cast(op.Reshape(mask, _ints(op, 0, -1)), to=ir.DataType.BOOL)
        hidden = op.Add(self.embeddings.patch_embedding(op, pixels),
                        op.Gather(self.embeddings.position_embedding(op),
                                  self._position_ids(op, mask, valid), axis=0))
        # the additive key mask: 0, or the lowest float where the patch is padding
        lowest = op.CastLike(_f32(op, float(np.finfo(np.float32).min)), hidden)
        bias = op.Where(valid, op.CastLike(_f32(op, 0.0), hidden), lowest)
        patches = self.side * self.side  # onnxruntime's Attention wants the query dim whole
        bias = op.Expand(op.Unsqueeze(bias, _ints(op, 1, 2)), _ints(op, 1, 1, patches, 1))
        for layer in self.encoder.layers:
            hidden = layer(op, hidden, bias)
        return hidden

    def _position_ids(self, op, mask, valid):
        """transformers' bucketized positions: row/column index / valid extent, bucketed
        into ``side`` bins; padded patches read position 0."""
        side = self.side
        mask = op.Cast(mask, to=F32)
        rows = op.ReduceSum(op.Gather(mask, _ints(op, 0), axis=2), _ints(op, 1, 2), keepdims=0)
        cols = op.ReduceSum(op.Gather(mask, _ints(op, 0), axis=1), _ints(op, 1, 2), keepdims=0)
        boundaries = np.arange(1 / side, 1.0, 1 / side).astype(np.float32)
        bounds = op.Constant(value=ir.tensor(boundaries.reshape(1, 1, -1)))
        index = op.Constant(value=ir.tensor(np.arange(side, dtype=np.float32).reshape(1, -1)))
        top = _f32(op, float(np.float32(1.0 - 1e-6)))

        def bucket(count):  # [N] -> [N, side] int64
            step = op.Div(_f32(op, 1.0), count)
            frac = op.Min(op.Mul(index, op.Unsqueeze(step, _ints(op, 1))), top)
            hits = op.Cast(op.LessOrEqual(bounds, op.Unsqueeze(frac, _ints(op, 2))), to=I64)
            return op.ReduceSum(hits, _ints(op, 2), keepdims=0)

        grid = op.Add(op.Mul(op.Unsqueeze(bucket(rows), _ints(op, 2)), _i64(op, side)),
                      op.Unsqueeze(bucket(cols), _ints(op, 1)))
        return op.Where(valid, op.Reshape(grid, _ints(op, 0, -1)), _i64(op, 0))


class _Embeddings(nn.Module):
    def __init__(self, vision: CLIPVisionConfig):
        super().__init__()
        self.patch_embedding = PatchConv(vision, bias=True)
        self.position_embedding = _Table([vision.num_patches, vision.hidden_size])


class _Encoder(nn.Module):
    def __init__(self, vision: CLIPVisionConfig, layers: int):
        super().__init__()
        self.layers = nn.ModuleList([CLIPEncoderLayer(vision) for _ in range(layers)])


class Phi4ImageEmbedding(nn.Module):
    """``image_embed``: tower, pooling, HD tiling and the projection."""

    def __init__(self, vision: CLIPVisionConfig, layers: int, crop_size: int, text_hidden: int):
        super().__init__()
        self.vision, self.crop_size, self.text_hidden = vision, crop_size, text_hidden
        side = vision.image_size // vision.patch_size
        self.side, self.base = side, (side + 1) // 2
        dim = vision.hidden_size
        self.img_processor = Phi4VisionTower(vision, layers)
        self.global_img_feature_extensor = Weight([1, dim], checkpoint_shape=[1, 1, dim],
                                                  transform=lambda a: a.reshape(1, -1))
        self.sub_img_feature_extensor = Weight([1, dim], checkpoint_shape=[1, 1, 1, dim],
                                               transform=lambda a: a.reshape(1, -1))
        self.img_projection_up = Linear(dim, text_hidden, True)
        self.img_projection_down = Linear(text_hidden, text_hidden, True)

    def forward(self, op, pixel_values, image_sizes, image_attention_mask):
        vision, side = self.vision, self.side
        size = vision.image_size
        pixels = op.Reshape(pixel_values, _ints(op, -1, vision.num_channels, size, size))
        mask = op.Reshape(image_attention_mask, _ints(op, -1, side, side))
        hidden = self.img_processor(op, pixels, mask)  # [N, side^2, dim]
        grid = op.Transpose(op.Reshape(hidden, _ints(op, 0, side, side, vision.hidden_size)),
                            perm=[0, 3, 1, 2])
        if side % 2:
            grid = op.Pad(grid, _ints(op, 0, 0, 0, 0, 0, 0, 1, 1), mode="reflect")
        pooled = op.AveragePool(grid, kernel_shape=[2, 2], strides=[2, 2])
        table = op.Reshape(op.Transpose(pooled, perm=[0, 2, 3, 1]),
                           _ints(op, -1, vision.hidden_size))  # [N * base^2, dim]
        table = op.Concat(table, self.sub_img_feature_extensor,
                          self.global_img_feature_extensor, axis=0)
        index = self._token_rows(op, image_sizes, image_attention_mask)
        tokens = op.Gather(table, index, axis=0)
        up = op.Gelu(self.img_projection_up(op, tokens))
        return self.img_projection_down(op, up)

    def _extents(self, op, image_sizes, image_attention_mask):
        """Per image: sub-crop grid (h, w) and the valid tiled extent (rows, cols) in
        pooled tokens, read from every second patch of the mask as transformers does."""
        sizes = op.Div(image_sizes, _i64(op, self.crop_size))
        h = op.Gather(sizes, _i64(op, 0), axis=1)
        w = op.Gather(sizes, _i64(op, 1), axis=1)
        sub = op.Slice(image_attention_mask, _ints(op, 0, 0), _ints(op, 2**62, 2**62),
                       _ints(op, 2, 3), _ints(op, 2, 2))  # [images, crops, base, base]
        sub = op.Cast(sub, to=F32)
        first_col = op.ReduceSum(op.Gather(sub, _i64(op, 0), axis=3), _ints(op, 2), keepdims=0)
        first_row = op.ReduceSum(op.Gather(sub, _i64(op, 0), axis=2), _ints(op, 2), keepdims=0)
        crop = op.Unsqueeze(op.Range(_i64(op, 0), op.Squeeze(op.Shape(sub, start=1, end=2)),
                                     _i64(op, 1)), _ints(op, 0))  # [1, crops]
        h1, w1 = op.Unsqueeze(h, _ints(op, 1)), op.Unsqueeze(w, _ints(op, 1))
        is_sub = op.And(op.GreaterOrEqual(crop, _i64(op, 1)),
                        op.LessOrEqual(crop, op.Mul(h1, w1)))
        left = op.And(is_sub, op.Equal(op.Mod(op.Sub(crop, _i64(op, 1)), w1), _i64(op, 0)))
        top = op.And(is_sub, op.LessOrEqual(crop, w1))
        zero = _f32(op, 0.0)
        rows = op.ReduceSum(op.Where(left, first_col, zero), _ints(op, 1), keepdims=0)
        cols = op.ReduceSum(op.Where(top, first_row, zero), _ints(op, 1), keepdims=0)
        return w, op.Cast(rows, to=I64), op.Cast(cols, to=I64)

    def _token_rows(self, op, image_sizes, image_attention_mask):
        """The row of [features..., sub extensor, global extensor] each output token reads."""
        base = self.base
        w, rows, cols = self._extents(op, image_sizes, image_attention_mask)
        crops = op.Shape(image_attention_mask, start=1, end=2)  # [1]
        sub_count = op.Mul(rows, op.Add(cols, _i64(op, 1)))
        counts = op.Add(sub_count, _i64(op, 1 + base * (base + 1)))
        ends = op.CumSum(counts, _i64(op, 0))
        token = op.Range(_i64(op, 0), op.ReduceSum(counts, keepdims=0), _i64(op, 1))
        image = op.ReduceSum(op.Cast(op.GreaterOrEqual(op.Unsqueeze(token, _ints(op, 1)),
                                                       op.Unsqueeze(ends, _ints(op, 0))),
                                     to=I64), _ints(op, 1), keepdims=0)
        local = op.Sub(token, op.Sub(op.Gather(ends, image), op.Gather(counts, image)))
        w, cols, sub_count = (op.Gather(x, image) for x in (w, cols, sub_count))
        table_rows = op.Mul(op.Mul(op.Squeeze(op.Shape(image_attention_mask, start=0, end=1)),
                                   op.Squeeze(crops)), _i64(op, base * base))
        sub_ext, global_ext = table_rows, op.Add(table_rows, _i64(op, 1))
        first = op.Mul(op.Mul(image, op.Squeeze(crops)), _i64(op, base * base))  # crop 0's row

        width = op.Add(cols, _i64(op, 1))  # tiled sub-crop rows, extensor last
        r, c = op.Div(local, width), op.Mod(local, width)
        crop = op.Add(op.Add(op.Mul(op.Div(r, _i64(op, base)), w), op.Div(c, _i64(op, base))),
                      _i64(op, 1))
        pos = op.Add(op.Mul(op.Mod(r, _i64(op, base)), _i64(op, base)), op.Mod(c, _i64(op, base)))
        in_sub = op.Where(op.Equal(c, cols), sub_ext,
                          op.Add(first, op.Add(op.Mul(crop, _i64(op, base * base)), pos)))

        g = op.Sub(local, op.Add(sub_count, _i64(op, 1)))  # global rows, extensor last
        gr, gc = op.Div(g, _i64(op, base + 1)), op.Mod(g, _i64(op, base + 1))
        in_global = op.Where(op.Equal(gc, _i64(op, base)), sub_ext,
                             op.Add(first, op.Add(op.Mul(gr, _i64(op, base)), gc)))
        rest = op.Where(op.Equal(local, sub_count), global_ext, in_global)
        return op.Where(op.Less(local, sub_count), in_sub, rest)
