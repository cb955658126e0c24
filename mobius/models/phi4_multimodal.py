"""Phi-4-multimodal (Phi4MultimodalForCausalLM, model_type "phi4_multimodal"), built as
the vision / embedding / decoder models of onnxruntime-genai's ``phi4mm`` type:

* ``vision``: the HD-crop image path of mobius/models/phi4mm_vision.py
  (pixel_values, image_sizes, image_attention_mask -> image_features).
* ``embedding``: ``model.embed_tokens`` of input_ids with the positions holding
  ``vision_config.image_token_id`` replaced, in order, by the image features.
* ``model``: the Phi-3 decoder (mobius/models/phi3.py: fused qkv / gate_up, partial
  rotary, LongRoPE) fed inputs_embeds.

The speech path (``audio_embed``: a conformer encoder and its projections) is not
built: the package is vision + text, its genai_config clears the ``speech`` section
(genai then loads phi4mm without a speech model and refuses audio input), and the
audio tensors are left unread with that reason.

Checkpoint names are transformers' (``model.layers.*``, ``lm_head``,
``model.embed_tokens_extend.image_embed.*``). The vision attention is
bidirectional over the valid patches, as transformers computes it with eager
attention (its sdpa path turns causal when no patch is padded).
"""

from __future__ import annotations

import logging
from typing import Any, Mapping

import onnx_ir as ir
from onnxscript import nn

from mobius.components.image_tokens import image_positions, merge_image_features
from mobius.components.lm_head import LMHead
from mobius.config.architecture import ArchitectureConfig
from mobius.errors import ConfigError
from mobius.models.clip import CLIPVisionConfig, hidden_state_index
from mobius.models.family import ModelFamily
from mobius.models.phi3 import Phi3ForCausalLM
from mobius.models.phi4mm_vision import Phi4ImageEmbedding
from mobius.tasks import vision_language
from mobius.tasks.task import TensorSpec
from mobius.weights.attach import IgnoredTensors

#: transformers' Phi4MultimodalVisionConfig defaults
VISION_DEFAULTS: Mapping[str, Any] = {
    "hidden_size": 1152, "intermediate_size": 4304, "num_hidden_layers": 27,
    "num_attention_heads": 16, "num_channels": 3, "image_size": 448, "patch_size": 14,
    "hidden_act": "gelu_pytorch_tanh", "layer_norm_eps": 1e-6, "crop_size": 448,
    "image_token_id": 200010, "feature_layer": -2,
}
#: transformers' Phi4MultimodalConfig text defaults a saved diff may leave out
_TEXT_DEFAULTS: Mapping[str, Any] = {
    "vocab_size": 200064, "hidden_size": 3072, "intermediate_size": 8192,
    "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
    "hidden_act": "silu", "max_position_embeddings": 131072,
    "original_max_position_embeddings": 4096, "rms_norm_eps": 1e-5,
    "tie_word_embeddings": False, "bos_token_id": 199999, "pad_token_id": 199999,
    "eos_token_id": [199999, 200020],
}
PROCESSOR_FILE = "vision_processor.json"
logger = logging.getLogger(__name__)


def normalize_phi4mm(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The text fields with transformers' defaults, vision_config's with its class's."""
    out = {**_TEXT_DEFAULTS, **{k: v for k, v in raw.items() if v is not None}}
    out["vision_config"] = {**VISION_DEFAULTS, **(raw.get("vision_config") or {})}
    return out


class Phi4MultimodalForCausalLM(nn.Module):
    """The vision-language module protocol of mobius/tasks/vision_language.py."""

    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        raw = normalize_phi4mm(config.raw)  # idempotent
        vision_raw = raw["vision_config"]
        vision = CLIPVisionConfig.from_dict(vision_raw, VISION_DEFAULTS)
        self.crop_size = int(vision_raw["crop_size"])
        if self.crop_size != vision.image_size:
            raise ConfigError(f"phi4_multimodal: vision_config crop_size {self.crop_size} must "
                              f"equal image_size {vision.image_size} (each crop is one tower input)")
        self.image_token_id = int(vision_raw["image_token_id"])
        if not 0 <= self.image_token_id < config.vocab_size:
            raise ConfigError(f"phi4_multimodal: vision_config image_token_id "
                              f"{self.image_token_id} is outside the vocabulary "
                              f"(vocab_size {config.vocab_size})")
        self.vision_layers = feature_layers(vision_raw, vision.num_hidden_layers)
        if raw.get("audio_config") is not None:
            logger.warning("phi4_multimodal: the speech tower is not built; the package runs "
                           "images and text (onnxruntime-genai refuses audio input)")
        self.vision, self.hidden_size = vision, config.hidden_size
        self.image_embed = Phi4ImageEmbedding(vision, self.vision_layers, self.crop_size,
                                              config.hidden_size)
        self.language_model = Phi3ForCausalLM(config)
        if config.tie_word_embeddings:  # the head's own copy (the lookup is in embedding.onnx)
            self.language_model.lm_head = LMHead(
                config.hidden_size, config.vocab_size,
                checkpoint_name="language_model.model.embed_tokens.weight")
        side = vision.image_size // vision.patch_size
        size = vision.image_size
        self.vision_inputs = (
            TensorSpec("pixel_values", None, (vision_language.NUM_IMAGES, vision_language.NUM_CROPS,
                                              vision.num_channels, size, size)),
            TensorSpec("image_sizes", ir.DataType.INT64, (vision_language.NUM_IMAGES, 2)),
            TensorSpec("image_attention_mask", None,
                       (vision_language.NUM_IMAGES, vision_language.NUM_CROPS, side, side)),
        )

    def encode_images(self, op, pixel_values, image_sizes, image_attention_mask):
        return self.image_embed(op, pixel_values, image_sizes, image_attention_mask)

    def embed(self, op, input_ids, image_features):
        is_image, token_ids = image_positions(op, input_ids, self.image_token_id)
        embeds = self.language_model.model.embed_tokens(op, token_ids)
        return merge_image_features(op, is_image, embeds, image_features, self.hidden_size)

    def genai_model_config(self) -> dict[str, Any]:
        """genai's phi4mm keys: the vision mask under its key, speech cleared (both
        names empty: genai loads the pipeline without a speech model)."""
        return {"vision": {"inputs": {"pixel_values": "pixel_values",
                                      "image_sizes": "image_sizes",
                                      "attention_mask": "image_attention_mask"}},
                "speech": {"filename": "", "config_filename": ""},
                "type": "phi4mm"}

    def genai_processor_files(self) -> dict[str, Any]:
        """onnxruntime-extensions' Phi-4 image processor: dynamic HD crops of
        ``crop_size``, 1/255, mean/std 0.5, the crops, sizes, masks and token counts."""
        base = self.crop_size
        steps = [("decode_image", "DecodeImage", {"color_space": "RGB"}, None),
                 ("phi4_vision_dynamic_preprocess", "Phi4VisionDynamicPreprocess",
                  {"dynamic_hd": 36, "dyhd_base_resolution": base}, None),
                 ("rescale", "Rescale", None, [":0"]),
                 ("normalize", "Normalize", {"mean": [0.5] * 3, "std": [0.5] * 3}, None),
                 ("phi4_vision_processor", "Phi4VisionProcessor",
                  {"dyhd_base_resolution": base, "interpolation": "CUBIC"},
                  [":0", "phi4_vision_dynamic_preprocess:1"])]
        transforms = []
        for name, kind, attrs, inputs in steps:
            operation = {"name": name, "type": kind}
            if inputs:
                operation["inputs"] = inputs
            if attrs:
                operation["attrs"] = attrs
            transforms.append({"operation": operation})
        return {PROCESSOR_FILE: {"processor": {"name": "phi_4_vision_processor",
                                               "transforms": transforms,
                                               "output_aligner": "phi4-vision-aligner"}}}


def feature_layers(vision_raw: Mapping[str, Any], num_layers: int) -> int:
    """How many tower layers hidden_states[feature_layer] needs."""
    return hidden_state_index(int(vision_raw["feature_layer"]), num_layers)


def _unread(config: ArchitectureConfig) -> tuple[IgnoredTensors, ...]:
    raw = normalize_phi4mm(config.raw)
    layers = feature_layers(raw["vision_config"], int(raw["vision_config"]["num_hidden_layers"]))
    tower = r"model\.embed_tokens_extend\.image_embed\.img_processor\."
    deeper = "|".join(str(i) for i in range(layers, int(raw["vision_config"]["num_hidden_layers"])))
    ignored = [
        IgnoredTensors(r"model\.embed_tokens_extend\.audio_embed\..*",
                       "phi4_multimodal: the speech model is not built (vision + text package)"),
        IgnoredTensors(tower + r"(post_layernorm|head)\..*",
                       "image features are a hidden state before post_layernorm and the head"),
    ]
    if deeper:
        ignored.append(IgnoredTensors(tower + rf"encoder\.layers\.({deeper})\..*",
                                      "layers after vision_config feature_layer are not read"))
    return tuple(ignored)


FAMILY = ModelFamily(
    name="phi4_multimodal",
    model_types=("phi4_multimodal",),
    architectures=("Phi4MultimodalForCausalLM",),
    module=Phi4MultimodalForCausalLM,
    task=vision_language.TASK,
    tiny_preset="tiny-phi4mm",
    normalize_raw=normalize_phi4mm,
    ignored_tensors=_unread,
    unread_config=("audio_config",),
    checkpoint_aliases=(
        ("language_model.model.", ("model.",)),
        ("language_model.lm_head.", ("lm_head.",)),
        ("image_embed.", ("model.embed_tokens_extend.image_embed.",)),
    ),
)
