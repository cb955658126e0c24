"""A transformers-layout Phi-4-multimodal checkpoint written back in the hub's original
layout (model_type "phi4mm"): the reverse of transformers' conversion script's
mapping, the decoder projections as PEFT LoRA layers with a vision and a speech adapter.
numpy and safetensors only (no torch), so the tests that convert need no reference."""

from __future__ import annotations

import json
import os
import re

import numpy as np

#: transformers' tensor name -> the hub's (each pattern matched from the name's start)
_TO_HUB = tuple((re.compile(p), r) for p, r in (
    (r"(.*\.encoders\.\d+\.feed_forward_(?:in|out))\.gate_up_proj\.", r"\1.net.0.linear."),
    (r"(.*\.encoders\.\d+\.feed_forward_(?:in|out))\.down_proj\.", r"\1.net.2."),
    (r"(.*\.encoders\.\d+\.self_attn)\.([qkv])_proj\.", r"\1.linear_\2."),
    (r"(.*\.encoders\.\d+\.self_attn)\.o_proj\.", r"\1.linear_out."),
    (r"(.*\.image_embed)\.img_projection_up\.", r"\1.img_projection.0."),
    (r"(.*\.image_embed)\.img_projection_down\.", r"\1.img_projection.2."),
    (r"(.*\.image_embed)\.global_img_feature_extensor$", r"\1.glb_GN"),
    (r"(.*\.image_embed)\.sub_img_feature_extensor$", r"\1.sub_GN"),
    (r"(.*\.audio_embed)\.up_proj_for_speech\.", r"\1.audio_projection.speech.0."),
    (r"(.*\.audio_embed)\.down_proj_for_speech\.", r"\1.audio_projection.speech.2."),
    (r"(.*\.audio_embed)\.up_proj_for_vision_speech\.", r"\1.audio_projection.vision.0."),
    (r"(.*\.audio_embed)\.down_proj_for_vision_speech\.", r"\1.audio_projection.vision.2."),
))
#: the decoder projections the released adapters wrap
DECODER_PROJECTION = re.compile(
    r"(model\.layers\.\d+\.(?:self_attn\.(?:qkv|o)_proj|mlp\.(?:gate_up|down)_proj))\.weight")
_PEFT = "base_model.model."
#: what the hub's adapters are (the released r / alpha are 256 / 512 and 320 / 640)
VISION_LORA, SPEECH_LORA = {"r": 4, "lora_alpha": 8}, {"r": 6, "lora_alpha": 3}


def to_hub(src: str, out: str, adapter: str | None = None, seed: int = 0,
           vision_lora: dict | None = None) -> str:
    """``src`` (saved by transformers) in the hub layout at ``out``. The vision adapter is
    the PEFT ``adapter`` folder's (its r and lora_alpha), or random (``vision_lora`` r /
    alpha, default VISION_LORA) and also written as a PEFT folder at ``out``-peft; the
    speech adapter is always random."""
    from safetensors.numpy import load_file, save_file

    rng = np.random.default_rng(seed)
    tensors = load_file(os.path.join(src, "model.safetensors"))
    if adapter is not None:
        vision_lora, vision = _peft_lora(adapter)
    else:
        vision_lora = vision_lora or VISION_LORA
        vision = _random_lora(tensors, vision_lora["r"], rng)
        write_peft(out + "-peft", vision, vision_lora)
    speech = _random_lora(tensors, SPEECH_LORA["r"], rng)
    hub = {}
    for name, value in tensors.items():
        match = DECODER_PROJECTION.fullmatch(name)
        if match is None:
            hub[_hub_name(name)] = value
            continue
        module = match[1]
        hub[f"{module}.base_layer.weight"] = value
        for kind, lora in (("vision", vision), ("speech", speech)):
            hub[f"{module}.lora_A.{kind}.weight"], hub[f"{module}.lora_B.{kind}.weight"] = (
                lora[module])
    os.makedirs(out, exist_ok=True)
    save_file(hub, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(src, "config.json")) as f:
        config = hub_config(json.load(f), vision_lora)
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    return out


def _hub_name(name: str) -> str:
    for pattern, replacement in _TO_HUB:
        new, count = pattern.subn(replacement, name, count=1)
        if count:
            return new
    return name


def _random_lora(tensors, rank: int, rng) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """module -> (A [rank, in], B [out, rank]), both random (a zero B would not matter)."""
    lora = {}
    for name, value in sorted(tensors.items()):
        match = DECODER_PROJECTION.fullmatch(name)
        if match:
            out_features, in_features = value.shape
            lora[match[1]] = (0.1 * rng.standard_normal((rank, in_features)).astype(np.float32),
                              0.1 * rng.standard_normal((out_features, rank)).astype(np.float32))
    return lora


def _peft_lora(folder: str):
    """(r / lora_alpha, module -> (A, B)) of a PEFT adapter folder."""
    from safetensors.numpy import load_file

    with open(os.path.join(folder, "adapter_config.json")) as f:
        config = json.load(f)
    tensors = load_file(os.path.join(folder, "adapter_model.safetensors"))
    lora = {}
    for name, value in tensors.items():
        if name.endswith(".lora_A.weight"):
            module = name[len(_PEFT):-len(".lora_A.weight")]
            lora[module] = (value, tensors[name.replace(".lora_A.", ".lora_B.")])
    return {"r": config["r"], "lora_alpha": config["lora_alpha"]}, lora


def write_peft(folder: str, lora, rank_alpha: dict) -> str:
    """``lora`` as a PEFT adapter folder (what ``build(adapter=...)`` merges)."""
    from safetensors.numpy import save_file

    os.makedirs(folder, exist_ok=True)
    tensors = {}
    for module, (a, b) in lora.items():
        tensors[f"{_PEFT}{module}.lora_A.weight"] = a
        tensors[f"{_PEFT}{module}.lora_B.weight"] = b
    save_file(tensors, os.path.join(folder, "adapter_model.safetensors"))
    with open(os.path.join(folder, "adapter_config.json"), "w") as f:
        json.dump({"peft_type": "LORA", **rank_alpha,
                   "target_modules": DECODER_PROJECTION.pattern}, f)
    return folder


def hub_config(raw: dict, vision_lora: dict) -> dict:
    """transformers' config.json as the hub's: the text keys at the top, rope_scaling,
    embd_layer / img_processor / audio_processor, the adapters' ranks."""
    vision, audio = raw["vision_config"], raw["audio_config"]
    rope = raw["rope_parameters"]
    text = {k: v for k, v in raw.items() if k not in (
        "vision_config", "audio_config", "rope_parameters", "architectures", "model_type",
        "transformers_version", "dtype")}
    scaling = None
    if rope["rope_type"] == "longrope":
        scaling = {"type": "longrope", "short_factor": rope["short_factor"],
                   "long_factor": rope["long_factor"]}
    return {
        **text, "model_type": "phi4mm", "architectures": ["Phi4MMForCausalLM"],
        "auto_map": {"AutoConfig": "configuration_phi4mm.Phi4MMConfig",
                     "AutoModelForCausalLM": "modeling_phi4mm.Phi4MMForCausalLM"},
        "rope_theta": rope["rope_theta"],
        "partial_rotary_factor": rope.get("partial_rotary_factor", 1.0),
        "rope_scaling": scaling,
        "embd_layer": {
            "embedding_cls": "image_audio",
            "image_embd_layer": {
                "crop_size": vision["crop_size"], "embedding_cls": "tune_image",
                "hd_transform_order": "sub_glb", "image_token_compression_cls": "avg_pool_2d",
                "projection_cls": "mlp", "use_hd_transform": True,
                "with_learnable_separator": True},
            "audio_embd_layer": {
                "compression_rate": audio["time_reduction"],
                "downsample_rate": audio["downsample_rate"], "embedding_cls": "audio",
                "projection_cls": "mlp", "use_conv_downsample": False, "use_qformer": False}},
        "img_processor": {"layer_idx": vision["feature_layer"], "type_feature": "patch",
                          "vision_config": {k: vision[k] for k in (
                              "hidden_size", "intermediate_size", "num_hidden_layers",
                              "num_attention_heads", "image_size", "patch_size",
                              "hidden_act", "layer_norm_eps", "image_token_id")}},
        "audio_processor": {"name": "cascades", "config": _hub_audio(audio)},
        "vision_lora": {**vision_lora, "dp": 0.0, "layer": DECODER_PROJECTION.pattern},
        "speech_lora": {**SPEECH_LORA, "dp": 0.01, "layer": DECODER_PROJECTION.pattern},
    }


def _hub_audio(audio: dict) -> dict:
    """audio_config as the hub's audio_processor.config (the released fixed keys too)."""
    renamed = {"hidden_size": "attention_dim", "num_attention_heads": "attention_heads",
               "intermediate_size": "linear_units",
               "depthwise_separable_out_channel": "depthwise_seperable_out_channel"}
    dropped = ("model_type", "nemo_final_size", "initializer_range", "feature_layer",
               "downsample_rate", "nemo_conv_channels", "bias_max_distance")
    config = {renamed.get(k, k): v for k, v in audio.items() if k not in dropped}
    return {**config, "nemo_conv_settings": {"conv_channels": audio["nemo_conv_channels"]},
            "relative_attention_bias_args": {"type": "t5",
                                             "t5_bias_max_distance": audio["bias_max_distance"]},
            "input_layer": "nemo_conv", "cnn_layer_norm": True, "batch_norm": False,
            "ext_pw_kernel_size": 1, "bias_in_glu": True, "causal": True,
            "activation_checkpointing": {"interval": 1, "module": "transformer", "offload": False},
            "encoder_embedding_config": {"input_size": audio["input_size"]}}
