"""transformers' side of modernbert_test (the reference_cases rule runs it at build time,
//rules:references.bzl): switch checkpoints, a base checkpoint respelled as the hub spells
it, and transformers' outputs on each."""

from __future__ import annotations

import json
import os
import shutil
import tempfile

import numpy as np

from mobius.models import modernbert, modernbert_heads
from mobius.tiny.bases import VOCAB_SIZE

SEQ_CLS, TOK_CLS, MLM = modernbert_heads.FAMILIES
#: weights 10x transformers' init scale: attention logits O(1) instead of ~0.01, so that
#: RoPE bases and windows change the output by far more than the parity tolerance
SHARP = {"initializer_range": 0.2}
#: (family, overrides): each case turns on switches the tiny preset leaves at their defaults
SWITCHES = {
    "biases": (modernbert.FAMILY, {"attention_bias": True, "mlp_bias": True, "norm_bias": True}),
    "mean_pooling_head_bias_silu": (SEQ_CLS, {"classifier_pooling": "mean", "classifier_bias": True,
                                              "classifier_activation": "silu"}),
    "token_head_bias": (TOK_CLS, {"classifier_bias": True, "norm_bias": True}),
    "untied_no_decoder_bias": (MLM, {"tie_word_embeddings": False, "decoder_bias": False}),
}
#: hub configs: no layer_types / rope_parameters; each value differs from the default
HUB = {"layer_types": None, "rope_parameters": None}
HUB_VALUES = {"global_attn_every_n_layers": 3, "local_rope_theta": 500.0,
              "global_rope_theta": 40.0, "local_attention": 8}
#: "base": ckpt/ (SHARP); "<switch>": ckpt/ + reference.npz; "hub_defaults",
#: "hub_every_value_changed": ckpt/ (base respelled) + reference.npz; "moves_<key>":
#: last_hidden_state.npz of base and base respelled with that hub value alone
CASES = ["base", *sorted(SWITCHES), "hub_defaults", "hub_every_value_changed",
         *(f"moves_{key}" for key in sorted(HUB_VALUES))]


def respelled(folder: str, out: str, **changes) -> str:
    """A copy of ``folder`` whose config.json has ``changes`` (None: key removed)."""
    shutil.copytree(folder, out, copy_function=shutil.copyfile)
    path = os.path.join(out, "config.json")
    with open(path) as f:
        raw = json.load(f)
    for key, value in changes.items():
        raw.pop(key, None) if value is None else raw.__setitem__(key, value)
    with open(path, "w") as f:
        json.dump(raw, f)
    return out


def hub_changes(case: str) -> dict:
    """The config.json edits of a "hub_*" or "moves_*" case."""
    if case.startswith("moves_"):
        key = case.removeprefix("moves_")
        return {**HUB, key: HUB_VALUES[key]}
    return {**HUB, **(HUB_VALUES if case == "hub_every_value_changed" else {})}


def moves_feeds() -> dict[str, np.ndarray]:
    """The padded batch the "moves_*" cases run transformers on."""
    mask = np.ones((2, 9), np.int64)
    mask[1, 6:] = 0
    ids = np.random.default_rng(0).integers(4, VOCAB_SIZE, size=(2, 9)) * mask
    return {"input_ids": ids, "attention_mask": mask}


def write_case(case: str, folder: str) -> None:
    from testing import encoder_runs
    from testing.hf_checkpoints import make_hf_checkpoint

    if case in SWITCHES:
        family, overrides = SWITCHES[case]
        checkpoint = make_hf_checkpoint(os.path.join(folder, "ckpt"), family.tiny_preset,
                                        **SHARP, **overrides)
        encoder_runs.save(encoder_runs.record(checkpoint), os.path.join(folder, "reference.npz"))
        return
    if case == "base":
        make_hf_checkpoint(os.path.join(folder, "ckpt"), modernbert.FAMILY.tiny_preset, **SHARP)
        return
    with tempfile.TemporaryDirectory() as tmp:
        base = make_hf_checkpoint(os.path.join(tmp, "base"), modernbert.FAMILY.tiny_preset,
                                  **SHARP)
        if case.startswith("hub_"):
            changed = respelled(base, os.path.join(folder, "ckpt"), **hub_changes(case))
            encoder_runs.save(encoder_runs.record(changed),
                              os.path.join(folder, "reference.npz"))
            return
        changed = respelled(base, os.path.join(tmp, "hub"), **hub_changes(case))
        before, after = (encoder_runs.run_reference(f, moves_feeds())["last_hidden_state"]
                         for f in (base, changed))
        np.savez(os.path.join(folder, "last_hidden_state.npz"), before=before, after=after)
