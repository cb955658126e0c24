"""transformers' side of vision_parity_test (the reference_cases rule runs it at build time,
//rules:references.bzl): transformers' outputs on each image family's seed-0 checkpoint,
and checkpoints with a config switch off its preset value, with their outputs."""

from __future__ import annotations

import os
import tempfile

from mobius.models.registry import FAMILIES
from mobius.tiny.presets import TINY_PRESETS

IMAGE_FAMILIES = [f for f in FAMILIES if f.task.reference.runner == "image_pass"]
BY_NAME = {f.name: f for f in IMAGE_FAMILIES}
#: (family, config overrides): every switch the families read, off its preset value
SWITCHES = {
    "vit-no-qkv-bias": ("vit", {"qkv_bias": False}),
    "vit-pooler-size-act": ("vit", {"pooler_output_size": 24, "pooler_act": "relu"}),
    "siglip-vision-no-head": ("siglip-vision", {"vision_use_head": False}),
    "dinov2-mlp-ratio": ("dinov2", {"mlp_ratio": 3}),
}
#: eos_token_id 2 (configs from before transformers fixed it)
LEGACY_EOS = ("clip", {"text_config": {**TINY_PRESETS["tiny-clip"]["text_config"],
                                       "eos_token_id": 2}})
#: "<family>": reference.npz of its seed-0 checkpoint (hf_checkpoints.seed0_checkpoint);
#: "<switch>" and "clip-legacy-eos": ckpt/ and reference.npz
CASES = [*BY_NAME, *sorted(SWITCHES), "clip-legacy-eos"]


def write_case(case: str, folder: str) -> None:
    from testing import vision_runs
    from testing.hf_checkpoints import make_hf_checkpoint, seed0_checkpoint

    reference = os.path.join(folder, "reference.npz")
    if case not in BY_NAME:
        name, overrides = SWITCHES.get(case, LEGACY_EOS)
        family = BY_NAME[name]
        checkpoint = make_hf_checkpoint(os.path.join(folder, "ckpt"), family.tiny_preset,
                                        **overrides)
        vision_runs.save(vision_runs.record(checkpoint, family), reference)
        return
    family = BY_NAME[case]
    with tempfile.TemporaryDirectory() as tmp:
        checkpoint = seed0_checkpoint(os.path.join(tmp, "ckpt"), family.tiny_preset)
        vision_runs.save(vision_runs.record(checkpoint, family), reference)
