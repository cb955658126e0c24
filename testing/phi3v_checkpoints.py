"""Tiny Phi-3-vision checkpoints in the hub layout, and the torch reference they are
compared with (the test side only: torch is imported inside functions).

transformers has no Phi-3-vision class (the hub checkpoints ship modeling_phi3_v.py /
image_embedding_phi3_v.py as auto_map code, which no test runs). The reference is
written from the published description of that model: transformers' CLIPVisionModel
(the tower, hidden state ``layer_idx`` without its class token), each crop's 2 x 2
patch blocks merged into 4C features, the HD layout (sub-crops tiled, every row closed
by ``sub_GN``; ``glb_GN``; the global crop, rows closed the same way), ``img_projection``
(Linear, exact GELU, Linear), and transformers' Phi3ForCausalLM fed the token
embeddings with the negative-id positions replaced in order. The checkpoint is that
reference's state dict under the hub's names (every parameter random, the tower's
unread last layer and post_layernorm included), with auto_map and a processor config.
"""

from __future__ import annotations

import json
import os

import numpy as np

from mobius.models.phi3_v import CLIP_NORMALIZATION
from mobius.tiny.checkpoint import write_tiny_preprocessors
from mobius.tiny.presets import TINY_PRESETS

PRESET = "tiny-phi3v"
CROP = 336
AUTO_MAP = {"AutoConfig": "configuration_phi3_v.Phi3VConfig",
            "AutoModelForCausalLM": "modeling_phi3_v.Phi3VForCausalLM"}
_TOWER = "model.vision_embed_tokens.img_processor."


def preset(img_processor: dict | None = None, embd_layer: dict | None = None,
           **overrides) -> dict:
    """tiny-phi3v's config.json with overrides (the two image sections merged)."""
    base = TINY_PRESETS[PRESET]
    raw = {**base, **overrides, "auto_map": AUTO_MAP}
    raw["img_processor"] = {**base["img_processor"], **(img_processor or {})}
    raw["embd_layer"] = {**base["embd_layer"], **(embd_layer or {})}
    return raw


def _reference_class():
    import torch
    import transformers

    class Phi3VReference(torch.nn.Module):
        """The published Phi-3-vision forward over transformers' modules."""

        def __init__(self, raw: dict):
            super().__init__()
            img = raw["img_processor"]
            clip = {"hidden_size": 1024, "intermediate_size": 4096, "num_hidden_layers": 24,
                    "num_attention_heads": 16, "image_size": CROP, "patch_size": 14,
                    "hidden_act": "quick_gelu", "layer_norm_eps": 1e-5,
                    **img.get("clip_config", {})}
            self.layer_idx, dim = img.get("layer_idx", -2), 4 * clip["hidden_size"]
            self.clip = transformers.CLIPVisionModel(transformers.CLIPVisionConfig(**clip))
            self.lm = transformers.Phi3ForCausalLM(text_config(raw))
            self.glb_GN = torch.nn.Parameter(torch.randn(1, 1, dim))
            self.sub_GN = torch.nn.Parameter(torch.randn(1, 1, 1, dim))
            hidden = raw["hidden_size"]
            self.img_projection = torch.nn.Sequential(
                torch.nn.Linear(dim, hidden), torch.nn.GELU(), torch.nn.Linear(hidden, hidden))

        def image_features(self, pixel_values, image_sizes):
            images, crops = pixel_values.shape[:2]
            states = self.clip(pixel_values.flatten(0, 1), output_hidden_states=True)
            patches = states.hidden_states[self.layer_idx][:, 1:]
            side = int(patches.shape[1] ** 0.5)
            b, c = side // 2, patches.shape[-1]
            merged = (patches.reshape(images, crops, b, 2, b, 2, c)
                      .permute(0, 1, 2, 4, 3, 5, 6).reshape(images, crops, b, b, 4 * c))
            sub_gn = self.sub_GN.reshape(1, 1, -1)
            out = []
            for i, (height, width) in enumerate(image_sizes.tolist()):
                h, w = height // CROP, width // CROP
                grid = (merged[i, 1:1 + h * w].reshape(h, w, b, b, 4 * c)
                        .permute(0, 2, 1, 3, 4).reshape(h * b, w * b, 4 * c))
                for part in (grid, merged[i, 0]):
                    rows = part.shape[0]
                    closed = torch.cat([part, sub_gn.expand(rows, 1, -1)], dim=1)
                    out.append(closed.reshape(-1, 4 * c))
                    if part is grid:
                        out.append(self.glb_GN.reshape(1, -1))
            return self.img_projection(torch.cat(out))

        def embeddings(self, input_ids, pixel_values=None, image_sizes=None):
            is_image = (input_ids < 0) & (input_ids > -10**9)
            embeds = self.lm.model.embed_tokens(input_ids.clamp_min(0))
            if pixel_values is not None:
                features = self.image_features(pixel_values, image_sizes)
                embeds = embeds.clone()
                embeds[is_image] = features.to(embeds.dtype)
            return embeds

        def forward(self, input_ids, attention_mask=None, pixel_values=None, image_sizes=None,
                    position_ids=None, past_key_values=None, use_cache=True):
            embeds = self.embeddings(input_ids, pixel_values, image_sizes)
            return self.lm(inputs_embeds=embeds, attention_mask=attention_mask,
                           position_ids=position_ids, past_key_values=past_key_values,
                           use_cache=use_cache)

    return Phi3VReference


def text_config(raw: dict):
    """transformers' Phi3Config of the decoder (4.x's rope "su" is LongRoPE)."""
    import transformers

    rope = {"rope_type": "default", "rope_theta": raw["rope_theta"]}
    scaling = raw.get("rope_scaling")
    if scaling:
        rope = {"rope_type": "longrope", "rope_theta": raw["rope_theta"],
                "short_factor": scaling["short_factor"], "long_factor": scaling["long_factor"],
                "original_max_position_embeddings": raw["original_max_position_embeddings"]}
    keys = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
            "num_attention_heads", "num_key_value_heads", "max_position_embeddings",
            "original_max_position_embeddings", "rms_norm_eps", "hidden_act", "bos_token_id",
            "eos_token_id", "pad_token_id", "tie_word_embeddings")
    return transformers.Phi3Config(**{k: raw[k] for k in keys if k in raw},
                                   rope_parameters=rope)


def _hub_names(state: dict) -> dict:
    """The reference's state dict under the hub checkpoint's tensor names."""
    out = {}
    for name, tensor in state.items():
        if name.startswith("lm."):
            name = name[len("lm."):]
        elif name.startswith("clip."):  # transformers 5 keeps no vision_model level
            name = _TOWER + "vision_model." + name[len("clip."):].removeprefix("vision_model.")
        else:
            name = "model.vision_embed_tokens." + name
        out[name] = tensor.detach().float().contiguous()
    return out


def make_phi3v_checkpoint(folder: str, seed: int = 0, **overrides) -> str:
    """A random reference saved in the hub layout (+ config.json with auto_map, a
    tokenizer and Phi-3-vision's preprocessor_config.json: 16 crops)."""
    import torch
    from safetensors.torch import save_file

    from testing.hf_checkpoints import randomize_parameters

    raw = preset(**overrides)
    torch.manual_seed(seed)
    model = _reference_class()(raw)
    randomize_parameters(model, seed)
    with torch.no_grad():  # std comparable to the weights: the separators must matter
        for gn in (model.glb_GN, model.sub_GN):
            gn.mul_(0.5)
    os.makedirs(folder, exist_ok=True)
    state = {k: v for k, v in model.state_dict().items()
             if not k.endswith("position_ids")}
    if raw.get("tie_word_embeddings"):
        state.pop("lm.lm_head.weight", None)
    save_file(_hub_names(state), os.path.join(folder, "model.safetensors"),
              metadata={"format": "pt"})
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(raw, f, indent=2)
    with open(os.path.join(folder, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": raw["bos_token_id"], "eos_token_id": raw["eos_token_id"],
                   "do_sample": False}, f)
    write_tiny_preprocessors(folder, raw)
    with open(os.path.join(folder, "preprocessor_config.json"), "w") as f:
        json.dump({"image_processor_type": "Phi3VImageProcessor", "num_crops": 16,
                   "num_img_tokens": 144, **CLIP_NORMALIZATION}, f, indent=2)
    return folder


def load_phi3v(folder: str):
    """The reference holding ``folder``'s weights (hub names mapped back)."""
    import torch
    from safetensors.torch import load_file

    with open(os.path.join(folder, "config.json")) as f:
        raw = json.load(f)
    model = _reference_class()(raw)
    names = {v: k for k, v in zip(model.state_dict(), _hub_names(model.state_dict()))}
    state = {names[k]: v for k, v in load_file(os.path.join(folder, "model.safetensors")).items()}
    if raw.get("tie_word_embeddings"):
        state["lm.lm_head.weight"] = state["lm.model.embed_tokens.weight"]
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and all(k.endswith("position_ids") for k in missing), missing
    return model.eval().to(torch.float32)


def hd_inputs(grids, crops: int, rng):
    """pixel_values [images, crops + 1, 3, CROP, CROP] (zero crops padding),
    image_sizes [images, 2] and each image's token count, for ``grids`` = [(h, w), ...]."""
    from mobius.models.phi3v_vision import token_count

    pixels = np.zeros((len(grids), crops + 1, 3, CROP, CROP), np.float32)
    sizes = np.array([[h * CROP, w * CROP] for h, w in grids], np.int64)
    for i, (h, w) in enumerate(grids):
        pixels[i, :1 + h * w] = rng.standard_normal((1 + h * w, 3, CROP, CROP))
    counts = [token_count(h * CROP, w * CROP, CROP, 12) for h, w in sizes // CROP]
    return pixels, sizes, counts
