"""Phi-4-multimodal (Phi4MultimodalForCausalLM, model_type "phi4_multimodal"), built as
the vision / speech / embedding / decoder models of onnxruntime-genai's ``phi4mm`` type:

* ``vision``: the HD-crop image path of mobius/models/phi4mm_vision.py
  (pixel_values, image_sizes, image_attention_mask -> image_features).
* ``speech`` (where config.json has an audio_config): the conformer speech path of
  mobius/models/phi4mm_audio.py (audio_embeds, audio_attention_mask, audio_sizes,
  audio_projection_mode -> audio_features). Without one, genai_config clears ``speech``.
* ``embedding``: ``model.embed_tokens`` of input_ids with the positions holding
  ``vision_config.image_token_id`` (``audio_config.audio_token_id``) replaced, in
  order, by the image (audio) features.
* ``model``: the Phi-3 decoder (mobius/models/phi3.py: fused qkv / gate_up, partial
  rotary, LongRoPE) fed inputs_embeds.

Checkpoint names are transformers' (``model.layers.*``, ``lm_head``,
``model.embed_tokens_extend.image_embed.*``); the hub's original release (model_type
"phi4mm", auto_map code, LoRA decoder) is read through mobius/models/phi4mm_hub.py.
The vision attention is bidirectional over the valid patches, as transformers computes
it with eager attention (its sdpa path turns causal when no patch is padded).
"""

from __future__ import annotations

import dataclasses
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
from mobius.models.phi4mm_audio import Phi4AudioEmbedding
from mobius.models.phi4mm_hub import from_hub, hub_view, is_hub
from mobius.models.phi4mm_vision import Phi4ImageEmbedding
from mobius.tasks import vision_language
from mobius.tasks.task import TensorSpec
from mobius.weights.attach import IgnoredTensors, ignored_layers
from mobius.tiny.bases import COMMON, VOCAB_SIZE

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
#: transformers' Phi4MultimodalAudioConfig defaults
AUDIO_DEFAULTS: Mapping[str, Any] = {
    "hidden_size": 1024, "intermediate_size": 1536, "num_blocks": 24, "num_attention_heads": 16,
    "activation": "swish", "chunk_size": -1, "left_chunk": 18, "ext_pw_out_channel": 1024,
    "depthwise_separable_out_channel": 1024, "depthwise_multiplier": 1, "kernel_size": 3,
    "conv_activation": "swish", "input_size": 80, "conv_glu_type": "swish",
    "time_reduction": 8, "bias_max_distance": 1000, "bias_symmetric": False,
    "nemo_activation": "relu", "nemo_conv_channels": 1024, "downsample_rate": 1,
    "audio_token_id": 200011,
}
PROCESSOR_FILE, SPEECH_PROCESSOR_FILE = "vision_processor.json", "speech_processor.json"


def normalize_phi4mm(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The text fields with transformers' defaults, vision_config's with its class's
    (a hub config.json first as transformers' conversion would write it)."""
    if is_hub(raw):
        raw = from_hub(raw)
    out = {**_TEXT_DEFAULTS, **{k: v for k, v in raw.items() if v is not None}}
    out["vision_config"] = {**VISION_DEFAULTS, **(raw.get("vision_config") or {})}
    if raw.get("audio_config") is not None:
        out["audio_config"] = {**AUDIO_DEFAULTS, **raw["audio_config"]}
    return out


@dataclasses.dataclass(frozen=True)
class Phi4MMOptions:
    """The normalized sub-configs (normalize_phi4mm); no audio_config: no speech model.
    hub_layout: the hub's tensors (phi4mm_hub.py), vision_lora its merged adapter."""

    vision_config: dict | None = None
    audio_config: dict | None = None
    hub_layout: bool = False
    vision_lora: dict | None = None


class Phi4MultimodalForCausalLM(nn.Module):
    """The vision-language module protocol of mobius/tasks/vision_language.py."""

    def __init__(self, config: ArchitectureConfig):
        super().__init__()
        vision_raw = config.options.vision_config
        vision = CLIPVisionConfig.from_dict(vision_raw, VISION_DEFAULTS)
        self.crop_size = int(vision_raw["crop_size"])
        if self.crop_size != vision.image_size:
            raise ConfigError(f"phi4_multimodal: vision_config crop_size {self.crop_size} must "
                              f"equal image_size {vision.image_size} (a crop is a tower input)")
        self.image_token_id = int(vision_raw["image_token_id"])
        if not 0 <= self.image_token_id < config.vocab_size:
            raise ConfigError(f"phi4_multimodal: vision_config image_token_id "
                              f"{self.image_token_id} is outside the vocabulary "
                              f"(vocab_size {config.vocab_size})")
        self.vision_layers = feature_layers(vision_raw, vision.num_hidden_layers)
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
        audio = config.options.audio_config
        self.audio_token_id = None
        if audio is not None:
            self.audio_token_id = int(audio["audio_token_id"])
            if not 0 <= self.audio_token_id < config.vocab_size:
                raise ConfigError(f"phi4_multimodal: audio_config audio_token_id "
                                  f"{self.audio_token_id} is outside the vocabulary "
                                  f"(vocab_size {config.vocab_size})")
            self.audio_embed = Phi4AudioEmbedding(audio, config.hidden_size)
            self.speech_inputs = speech_specs(int(audio["input_size"]))

    def encode_images(self, op, pixel_values, image_sizes, image_attention_mask):
        return self.image_embed(op, pixel_values, image_sizes, image_attention_mask)

    def encode_audio(self, op, audio_embeds, audio_attention_mask, audio_sizes, mode):
        return self.audio_embed(op, audio_embeds, audio_attention_mask, audio_sizes, mode)

    def embed(self, op, input_ids, image_features, audio_features=None):
        is_image, token_ids = image_positions(op, input_ids, self.image_token_id)
        if audio_features is not None:
            is_audio, token_ids = image_positions(op, token_ids, self.audio_token_id)
        embeds = self.language_model.model.embed_tokens(op, token_ids)
        embeds = merge_image_features(op, is_image, embeds, image_features, self.hidden_size)
        if audio_features is None:
            return embeds
        return merge_image_features(op, is_audio, embeds, audio_features, self.hidden_size)

    def genai_model_config(self, preprocessor: Mapping[str, Any]) -> dict[str, Any]:
        """genai's phi4mm keys: the vision mask under its key; the speech model and the
        embedding's audio_features, or speech cleared (both names empty: genai then
        runs without a speech model and refuses audio input)."""
        config: dict[str, Any] = {
            "vision": {"inputs": {"pixel_values": "pixel_values", "image_sizes": "image_sizes",
                                  "attention_mask": "image_attention_mask"}},
            "speech": {"filename": "", "config_filename": ""}, "type": "phi4mm"}
        if self.audio_token_id is not None:
            config["speech"] = {
                "filename": "speech.onnx", "config_filename": SPEECH_PROCESSOR_FILE,
                "inputs": {"audio_embeds": "audio_embeds",
                           "attention_mask": "audio_attention_mask",
                           "audio_sizes": "audio_sizes",
                           "audio_projection_mode": "audio_projection_mode"},
                "outputs": {"audio_features": "audio_features"}}
            config["embedding"] = {
                "filename": "embedding.onnx",
                "inputs": {"input_ids": "input_ids", "image_features": "image_features",
                           "audio_features": "audio_features"},
                "outputs": {"inputs_embeds": "inputs_embeds"}}
        return config

    def genai_processor_files(self, preprocessor: Mapping[str, Any]) -> dict[str, Any]:
        """onnxruntime-extensions' Phi-4 image processor: dynamic HD crops of
        ``crop_size``, 1/255, mean/std 0.5, the crops, sizes, masks and token counts
        (the checkpoint's ``preprocessor`` settings are not read yet)."""
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
        files = {PROCESSOR_FILE: {"processor": {"name": "phi_4_vision_processor",
                                                "transforms": transforms,
                                                "output_aligner": "phi4-vision-aligner"}}}
        if self.audio_token_id is not None:
            files[SPEECH_PROCESSOR_FILE] = self.audio_embed.genai_feature_extraction()
        return files


def speech_specs(mel: int) -> tuple[TensorSpec, ...]:
    """genai's phi4mm speech inputs."""
    audios, frames = vision_language.NUM_AUDIOS, vision_language.NUM_FRAMES
    return (TensorSpec("audio_embeds", None, (audios, frames, mel)),
            TensorSpec("audio_attention_mask", ir.DataType.BOOL, (audios, frames)),
            TensorSpec("audio_sizes", ir.DataType.INT64, (audios,)),
            TensorSpec("audio_projection_mode", ir.DataType.INT64, (1,)))


def feature_layers(vision_raw: Mapping[str, Any], num_layers: int) -> int:
    """How many tower layers hidden_states[feature_layer] needs."""
    return hidden_state_index(int(vision_raw["feature_layer"]), num_layers)


def _unread(config: ArchitectureConfig) -> tuple[IgnoredTensors, ...]:
    vision = config.options.vision_config
    layers = feature_layers(vision, int(vision["num_hidden_layers"]))
    tower = r"model\.embed_tokens_extend\.image_embed\.img_processor\."
    speech = ((IgnoredTensors(r"model\.layers\.\d+\..*\.lora_[AB]\.speech\.weight",
                              "genai runs one decoder, the vision adapter merged "
                              "(mobius/models/phi4mm_hub.py)"),)
              if config.options.hub_layout else ())
    return (IgnoredTensors(tower + r"(post_layernorm|head)\..*",
                           "image features are a hidden state before post_layernorm and the head"),
            *speech,
            *ignored_layers(tower + r"encoder\.layers\.", layers, int(vision["num_hidden_layers"]),
                            "layers after vision_config feature_layer are not read"))


FAMILY = ModelFamily(
    name="phi4_multimodal", cohorts=("every-dtype",),
    model_types=("phi4_multimodal", "phi4mm"),
    architectures=("Phi4MultimodalForCausalLM", "Phi4MMForCausalLM"),
    module=Phi4MultimodalForCausalLM,
    task=vision_language.TASK,
    tiny_preset="tiny-phi4mm",
    normalize_raw=normalize_phi4mm,
    options=Phi4MMOptions,
    ignored_tensors=_unread,
    checkpoint_view=hub_view,
    checkpoint_aliases=(  # transformers' names; the module's own (mobius' tiny checkpoints)
        ("language_model.model.", ("model.", "language_model.model.")),
        ("language_model.lm_head.", ("lm_head.", "language_model.lm_head.")),
        ("image_embed.", ("model.embed_tokens_extend.image_embed.", "image_embed.")),
        ("audio_embed.", ("model.embed_tokens_extend.audio_embed.", "audio_embed.")),
    ),
)

# Phi-4-multimodal (mobius/models/phi4_multimodal.py): the common decoder as Phi-3 with
# partial rotary 0.75 (12 of 16 dims); a 2-layer SigLIP tower (hidden 32, 2 heads, MLP
# 48) on genai's fixed 448 px crops of 14 px patches (32 x 32 -> 16 x 16 pooled tokens),
# read at hidden state -2; a 1-block conformer audio tower the package does not build.
# The image/audio tokens are the vocabulary's last entries.
#: this family's tiny checkpoints (mobius/tiny/bases.py): name -> config.json
TINY_PRESETS = {
    "tiny-phi4mm": {
        **COMMON, "model_type": "phi4_multimodal", "architectures": ["Phi4MultimodalForCausalLM"],
        "pad_token_id": 0, "rms_norm_eps": 1e-5, "max_position_embeddings": 4096,
        "original_max_position_embeddings": 4096, "tie_word_embeddings": False,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0,
                            "partial_rotary_factor": 0.75},
        "vision_config": {
            "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
            "num_attention_heads": 2, "image_size": 448, "patch_size": 14, "crop_size": 448,
            "image_token_id": VOCAB_SIZE - 1, "feature_layer": -2,
        },
        "audio_config": {
            "hidden_size": 32, "intermediate_size": 48, "num_blocks": 1, "num_attention_heads": 2,
            "ext_pw_out_channel": 32, "depthwise_separable_out_channel": 32,
            "nemo_conv_channels": 32, "audio_token_id": VOCAB_SIZE - 2,
        },
    },
}
