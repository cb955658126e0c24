"""Phi-4-multimodal as released on the hub (model_type "phi4mm", Phi4MMForCausalLM with
auto_map code), read natively: its config.json and tensor names, turned into those of
transformers' Phi4MultimodalForCausalLM, which mobius/models/phi4_multimodal.py builds.

The mapping is the one transformers' convert_phi4_multimodal_weights_to_hf states: a few
audio-encoder, projection and separator renames; the decoder projections are PEFT LoRA
layers (``<proj>.base_layer.weight`` with ``lora_A`` / ``lora_B`` ``.vision`` and
``.speech``). The released code switches adapters per prompt (vision for images, speech
for audio); onnxruntime-genai's phi4mm type runs one decoder for every prompt, and ORT
GenAI's builder builds it with the vision adapter applied. mobius does the same, merged:
``W + lora_alpha / r * B @ A`` (config.json ``vision_lora``) when the weight is read, so
the package is the peer's decoder without the extra MatMuls. The speech adapter is not
read (declared in phi4_multimodal.py's unread tensors).

The tower is the SigLIP-so400m the code hard-wires and the image / audio token ids are
its constants (200010 / 200011): mobius' own tiny checkpoints shrink the tower and move
the ids through ``img_processor.vision_config`` (transformers' vision_config fields) and
``audio_processor.config.audio_token_id``, which no hub checkpoint has.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Mapping

import numpy as np

from mobius.config.options import reject
from mobius.errors import ConfigError, WeightsError
from mobius.weights.lora import lora_scale

MODEL_TYPE = "phi4mm"
#: the image / audio placeholder ids the released code fixes
IMAGE_TOKEN_ID, AUDIO_TOKEN_ID = 200010, 200011
#: image_embd_layer: the code's default where config.json leaves a key out; the value
#: the released checkpoint has (the only one transformers and mobius build)
_IMAGE_EMBD = {
    "embedding_cls": (None, "tune_image"), "use_hd_transform": (False, True),
    "with_learnable_separator": (False, True), "hd_transform_order": ("glb_sub", "sub_glb"),
    "image_token_compression_cls": (None, "avg_pool_2d"), "projection_cls": ("linear", "mlp"),
}
_AUDIO_EMBD = {"embedding_cls": (None, "audio"), "projection_cls": ("linear", "mlp"),
               "use_qformer": (False, False), "use_conv_downsample": (False, False)}
#: audio_processor.config keys transformers' conversion drops, with the released value
_AUDIO_FIXED = {"input_layer": "nemo_conv", "cnn_layer_norm": True, "batch_norm": False,
                "ext_pw_kernel_size": 1, "bias_in_glu": True, "causal": True}
_AUDIO_DROPPED = ("activation_checkpointing", "encoder_embedding_config")
_AUDIO_RENAMES = {"attention_dim": "hidden_size", "attention_heads": "num_attention_heads",
                  "linear_units": "intermediate_size",
                  "depthwise_seperable_out_channel": "depthwise_separable_out_channel"}
_HUB_ONLY = ("embd_layer", "img_processor", "audio_processor", "speech_lora", "auto_map")


def is_hub(raw: Mapping[str, Any]) -> bool:
    return raw.get("model_type") == MODEL_TYPE


def from_hub(raw: Mapping[str, Any]) -> dict[str, Any]:
    """The hub config.json as transformers' Phi4MultimodalConfig would hold it (text keys
    as they are; vision_config, audio_config), refusing what neither builds."""
    reject(raw.get("quantization_config") is not None, MODEL_TYPE,
           "quantization_config (the hub layout is read as float weights only)")
    embd = raw.get("embd_layer")
    if not isinstance(embd, dict) or embd.get("embedding_cls") != "image_audio":
        raise ConfigError(f"{MODEL_TYPE}: embd_layer must be the released image_audio "
                          f"embedding, got {embd!r}")
    image = _released(embd.get("image_embd_layer") or {}, _IMAGE_EMBD, "image_embd_layer")
    audio_embd = _released(embd.get("audio_embd_layer") or {}, _AUDIO_EMBD, "audio_embd_layer")
    out = {k: v for k, v in raw.items() if k not in _HUB_ONLY}
    out["vision_config"] = _vision(raw.get("img_processor"), image.get("crop_size", 336))
    out["audio_config"] = _audio(raw.get("audio_processor"), audio_embd)
    out["vision_lora"] = _lora(raw.get("vision_lora"))
    out["hub_layout"] = True
    return out


def _released(section: Mapping[str, Any], known: Mapping[str, tuple], where: str) -> dict:
    for key, (default, released) in known.items():
        value = section.get(key, default)
        reject(value != released, MODEL_TYPE,
               f"embd_layer.{where}.{key} {value!r} (only the released {released!r})")
    return dict(section)


def _vision(img_processor: Any, crop_size: Any) -> dict[str, Any]:
    """vision_config: the fixed tower, read at img_processor.layer_idx (patch features)."""
    img = img_processor if isinstance(img_processor, dict) else {}
    reject(img.get("type_feature", "patch") != "patch", MODEL_TYPE,
           f"img_processor type_feature {img.get('type_feature')!r} (only 'patch')")
    layer = img.get("layer_idx", -2)
    if not isinstance(layer, int) or isinstance(layer, bool):
        raise ConfigError(f"{MODEL_TYPE}: img_processor layer_idx must be an integer, "
                          f"got {layer!r}")
    return {"image_token_id": IMAGE_TOKEN_ID, **(img.get("vision_config") or {}),
            "crop_size": crop_size, "feature_layer": layer}


def _audio(audio_processor: Any, audio_embd: Mapping[str, Any]) -> dict[str, Any]:
    """audio_config: audio_processor.config renamed as transformers' conversion does."""
    if not isinstance(audio_processor, dict) or audio_processor.get("name") != "cascades":
        raise ConfigError(f"{MODEL_TYPE}: audio_processor must be the released 'cascades' "
                          f"conformer, got {audio_processor!r}")
    config = dict(audio_processor.get("config") or {})
    for key, released in _AUDIO_FIXED.items():
        value = config.pop(key, released)
        reject(value != released, MODEL_TYPE,
               f"audio_processor.config.{key} {value!r} (only the released {released!r})")
    for key in _AUDIO_DROPPED:
        config.pop(key, None)
    out = {_AUDIO_RENAMES.get(k, k): v for k, v in config.items()}
    nemo = out.pop("nemo_conv_settings", None) or {}
    reject(set(nemo) - {"conv_channels"} != set(), MODEL_TYPE,
           f"audio_processor.config.nemo_conv_settings {nemo!r} (only conv_channels)")
    bias = out.pop("relative_attention_bias_args", None) or {"type": "t5"}
    reject(bias.get("type") != "t5" or set(bias) - {"type", "t5_bias_max_distance"} != set(),
           MODEL_TYPE, f"audio_processor.config.relative_attention_bias_args {bias!r} "
           f"(only a t5 bias with t5_bias_max_distance)")
    if "conv_channels" in nemo:
        out["nemo_conv_channels"] = nemo["conv_channels"]
    if "t5_bias_max_distance" in bias:
        out["bias_max_distance"] = bias["t5_bias_max_distance"]
    reduction = out.get("time_reduction", 8)
    rate = audio_embd.get("compression_rate", reduction)
    if rate != reduction:
        raise ConfigError(f"{MODEL_TYPE}: embd_layer.audio_embd_layer.compression_rate {rate!r} "
                          f"differs from the encoder's time_reduction {reduction!r}")
    if "downsample_rate" in audio_embd:
        out["downsample_rate"] = audio_embd["downsample_rate"]
    return {"audio_token_id": AUDIO_TOKEN_ID, **out}


def _lora(vision_lora: Any) -> dict[str, float] | None:
    """vision_lora's rank and alpha (checked); None: the checkpoint has no adapter."""
    if vision_lora is None:
        return None
    rank = vision_lora.get("r") if isinstance(vision_lora, dict) else None
    alpha = vision_lora.get("lora_alpha") if isinstance(vision_lora, dict) else None
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0
               for v in (rank, alpha)):
        raise ConfigError(f"{MODEL_TYPE}: vision_lora needs positive r and lora_alpha, "
                          f"got {vision_lora!r}")
    return {"r": rank, "lora_alpha": alpha}


#: hub tensor name -> transformers' (the conversion's mapping)
_AUDIO_LAYER = r"(.*\.audio_embed\.encoder\.encoders\.\d+)"
_RENAMES = tuple((re.compile(p), r) for p, r in (
    (_AUDIO_LAYER + r"\.feed_forward_(in|out)\.net\.0\.linear\.",
     r"\1.feed_forward_\2.gate_up_proj."),
    (_AUDIO_LAYER + r"\.feed_forward_(in|out)\.net\.2\.", r"\1.feed_forward_\2.down_proj."),
    (_AUDIO_LAYER + r"\.self_attn\.linear_([qkv])\.", r"\1.self_attn.\2_proj."),
    (_AUDIO_LAYER + r"\.self_attn\.linear_out\.", r"\1.self_attn.o_proj."),
    (r"(.*\.image_embed)\.img_projection\.0\.", r"\1.img_projection_up."),
    (r"(.*\.image_embed)\.img_projection\.2\.", r"\1.img_projection_down."),
    (r"(.*\.image_embed)\.glb_GN$", r"\1.global_img_feature_extensor"),
    (r"(.*\.image_embed)\.sub_GN$", r"\1.sub_img_feature_extensor"),
    (r"(.*\.audio_embed)\.audio_projection\.speech\.0\.", r"\1.up_proj_for_speech."),
    (r"(.*\.audio_embed)\.audio_projection\.speech\.2\.", r"\1.down_proj_for_speech."),
    (r"(.*\.audio_embed)\.audio_projection\.vision\.0\.", r"\1.up_proj_for_vision_speech."),
    (r"(.*\.audio_embed)\.audio_projection\.vision\.2\.", r"\1.down_proj_for_vision_speech."),
))
_BASE_LAYER = re.compile(r"(.*)\.base_layer\.(weight|bias)")
_VISION_LORA = re.compile(r"(.*)\.lora_([AB])\.vision\.weight")


def renamed(name: str) -> str:
    for pattern, replacement in _RENAMES:
        new, count = pattern.subn(replacement, name, count=1)
        if count:
            return new
    return name


class HubCheckpoint:
    """The hub checkpoint's tensors under transformers' names, each decoder projection
    with its vision adapter merged. Adapter tensors no projection takes (the speech
    adapter, a vision one without its base layer) keep their names: unread unless the
    family declares them."""

    def __init__(self, base, vision_lora: Mapping[str, float] | None):
        self.base = base
        self.names_to_hub: dict[str, str] = {}
        self.merged: dict[str, tuple[str, str, str]] = {}  # name -> (base layer, A, B)
        taken = set()
        for name in base.names():
            match = _BASE_LAYER.fullmatch(name)
            if match is None:
                continue
            target = f"{match[1]}.{match[2]}"
            if match[2] == "bias":
                self.names_to_hub[target] = name
                continue
            a, b = (f"{match[1]}.lora_{x}.vision.weight" for x in "AB")
            if a not in base or b not in base:
                raise WeightsError(f"{name}: a LoRA base layer without its vision adapter "
                                   f"({a} / {b})")
            if vision_lora is None:
                raise WeightsError(f"{name}: the checkpoint has vision LoRA adapters but "
                                   f"config.json has no vision_lora (r, lora_alpha)")
            _check_shapes(base, name, a, b)
            self.merged[target] = (name, a, b)
            taken.update((a, b))
        self.scale = lora_scale(vision_lora) if vision_lora else 0.0
        for name in base.names():
            if name not in taken and _BASE_LAYER.fullmatch(name) is None:
                self.names_to_hub[renamed(name)] = name

    def __contains__(self, name: str) -> bool:
        return name in self.names_to_hub or name in self.merged

    def names(self) -> list[str]:
        return [*self.names_to_hub, *self.merged]

    def info(self, name: str):
        hub = self.merged[name][0] if name in self.merged else self.names_to_hub[name]
        return dataclasses.replace(self.base.info(hub), name=name)

    def is_stored_as_read(self, name: str) -> bool:
        """A merged projection is computed; a renamed tensor is the file's bytes."""
        return name not in self.merged and self.base.is_stored_as_read(self.names_to_hub[name])

    def read(self, name: str) -> np.ndarray:
        if name not in self.merged:
            return self.base.read(self.names_to_hub[name])
        weight_name, a_name, b_name = self.merged[name]
        weight = self.base.read(weight_name)
        a = np.asarray(self.base.read(a_name), np.float32)
        b = np.asarray(self.base.read(b_name), np.float32)
        return (np.asarray(weight, np.float32) + self.scale * (b @ a)).astype(weight.dtype)


def _check_shapes(base, weight: str, a: str, b: str) -> None:
    w, sa, sb = (tuple(base.info(n).shape) for n in (weight, a, b))
    if len(w) != 2 or len(sa) != 2 or len(sb) != 2 or (sb[0], sa[1]) != w or sa[0] != sb[1]:
        raise WeightsError(f"vision LoRA shapes A{list(sa)} B{list(sb)} do not fit "
                           f"{weight} {list(w)}")


def hub_view(config, checkpoint):
    """The family's checkpoint view: the hub layout's tensors as transformers names them;
    a transformers-layout checkpoint as it is."""
    if not config.options.hub_layout:
        return checkpoint
    return HubCheckpoint(checkpoint, config.options.vision_lora)
