"""Parts the image families share (mobius/models/vit.py, dinov2.py, siglip.py,
clip_models.py): the vision config as an ArchitectureConfig, the patch
convolution, class token, token means and the image task I/O specs."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from onnxscript import nn

from mobius.components.weight import Weight
from mobius.models.clip import CLIPVisionConfig
from mobius.tasks.image import BATCH, pixel_values
from mobius.tasks.labels import id2label
from mobius.tasks.task import TensorSpec
from mobius.weights.attach import IgnoredTensors


def vision_section(raw: Mapping[str, Any]) -> Mapping[str, Any]:
    """The vision tower's fields: ``vision_config`` of a two-tower config, else the config."""
    return raw.get("vision_config") or raw


@dataclasses.dataclass(frozen=True)
class VisionOptions:
    """An image family's vision tower: ``vision_config`` of a two-tower config, else the
    config's own fields (None: the family's default)."""

    vision_config: dict | None = None
    hidden_size: int | None = None
    intermediate_size: int | None = None
    num_hidden_layers: int | None = None
    num_attention_heads: int | None = None
    num_channels: int | None = None
    image_size: int | None = None
    patch_size: int | None = None
    hidden_act: str | None = None
    layer_norm_eps: float | None = None


def vision_config(options: VisionOptions, defaults: Mapping[str, Any]) -> CLIPVisionConfig:
    own = {f.name: getattr(options, f.name) for f in dataclasses.fields(VisionOptions)}
    return CLIPVisionConfig.from_dict(vision_section(own), defaults)


#: Where a LLaVA-style vision-language checkpoint keeps its parts (llava, gemma3):
#: transformers before 4.52 saved vision_tower. / multi_modal_projector. /
#: language_model.model. / language_model.lm_head., later ones model.vision_tower. /
#: model.multi_modal_projector. / model.language_model. / lm_head.
VLM_CHECKPOINT_ALIASES = (
    ("vision_tower.vision_model.", ("vision_tower.vision_model.", "vision_tower.",
                                    "model.vision_tower.vision_model.", "model.vision_tower.")),
    ("multi_modal_projector.", ("multi_modal_projector.", "model.multi_modal_projector.")),
    ("language_model.model.", ("language_model.model.", "model.language_model.")),
    ("language_model.lm_head.", ("language_model.lm_head.", "lm_head.")),
)

#: buffers older checkpoints saved beside the weights (positions are 0..n-1 here)
POSITION_IDS = IgnoredTensors(r"(.*\.)?embeddings\.position_ids",
                              "buffer of older checkpoints: positions are 0..n-1")


def normalize_vision(defaults: Mapping[str, Any], classifier: bool = False):
    """normalize_raw of an image family: the vision tower's sizes under the standard
    names (ArchitectureConfig), no token ids (no text); ``vocab_size`` is the label
    count of a ``classifier``, else 1 (nothing is looked up by token)."""
    def normalize(raw: Mapping[str, Any]) -> dict[str, Any]:
        vision = CLIPVisionConfig.from_dict(vision_section(raw), defaults)
        out = {k: v for k, v in raw.items()
               if k not in ("bos_token_id", "eos_token_id", "pad_token_id", "head_dim")}
        labels = len(id2label(raw)) if classifier else 1
        out.update(hidden_size=vision.hidden_size, intermediate_size=vision.intermediate_size,
                   num_hidden_layers=vision.num_hidden_layers,
                   num_attention_heads=vision.num_attention_heads, vocab_size=labels,
                   max_position_embeddings=vision.num_patches + 1,
                   hidden_act=vision.hidden_act, layer_norm_eps=vision.layer_norm_eps)
        out.pop("num_key_value_heads", None)
        return out
    return normalize


class PatchConv(nn.Module):
    """Conv2d(kernel = stride = patch) over the image, flattened to tokens:
    [batch, channels, H, W] -> [batch, patches, hidden]."""

    def __init__(self, config: CLIPVisionConfig, bias: bool):
        super().__init__()
        hidden, patch = config.hidden_size, config.patch_size
        self.patch = patch
        self.weight = Weight([hidden, config.num_channels, patch, patch])
        self.bias = Weight([hidden]) if bias else None

    def forward(self, op, pixels):
        inputs = (pixels, self.weight) if self.bias is None else (pixels, self.weight, self.bias)
        patches = op.Conv(*inputs, kernel_shape=[self.patch] * 2, strides=[self.patch] * 2)
        patches = op.Reshape(patches, op.Constant(value_ints=[0, 0, -1]))
        return op.Transpose(patches, perm=[0, 2, 1])


def with_class_token(op, patches, class_token, positions, hidden: int, num_patches: int):
    """patches [batch, patches, hidden] -> [batch, 1 + patches, hidden] + positions, the
    class token first: the patches padded by one zero row, plus one table (positions
    with the class token added to row 0, folded at build time). Same sums as
    concat-then-add, and every dim stays inferable (the Skip*Norm fusions check them)."""
    padded = op.Pad(patches, op.Constant(value_ints=[0, 1, 0, 0, 0, 0]))
    token = op.Pad(op.Reshape(class_token, op.Constant(value_ints=[1, 1, hidden])),
                   op.Constant(value_ints=[0, 0, 0, 0, num_patches, 0]))
    return op.Add(padded, op.Add(positions, token))


def token(op, hidden, index: int = 0):
    """hidden [batch, tokens, dim] -> hidden[:, index] [batch, dim]."""
    return op.Squeeze(op.Gather(hidden, op.Constant(value_ints=[index]), axis=1),
                      op.Constant(value_ints=[1]))


def mean_tokens(op, hidden, start: int = 0):
    """The mean of hidden[:, start:] over the tokens: [batch, dim]."""
    if start:
        hidden = op.Slice(hidden, op.Constant(value_ints=[start]),
                          op.Constant(value_ints=[2**62]), op.Constant(value_ints=[1]))
    return op.ReduceMean(hidden, op.Constant(value_ints=[1]), keepdims=0)


def image_inputs(config: CLIPVisionConfig) -> tuple[TensorSpec, ...]:
    return (pixel_values(config.num_channels, config.image_size),)


def features_outputs(tokens: int, hidden: int, pooled: int | None) -> tuple[TensorSpec, ...]:
    """last_hidden_state [batch, tokens, hidden] (+ pooler_output [batch, pooled])."""
    outputs = (TensorSpec("last_hidden_state", None, (BATCH, tokens, hidden)),)
    if pooled is not None:
        outputs += (TensorSpec("pooler_output", None, (BATCH, pooled)),)
    return outputs


def logits_output(labels: int) -> tuple[TensorSpec, ...]:
    return (TensorSpec("logits", None, (BATCH, labels)),)
