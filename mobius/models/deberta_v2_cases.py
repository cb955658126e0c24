"""transformers' side of deberta_v2_test (the reference_cases rule runs it at build time,
//rules:references.bzl): transformers' position buckets, switch checkpoints with its
outputs, a DebertaV2ForMaskedLM checkpoint with its body's hidden states, and how each
preset value moves its logits."""

from __future__ import annotations

import json
import os
import shutil
import tempfile

import numpy as np

from mobius.models import deberta_v2
from mobius.tiny.bases import VOCAB_SIZE

SEQ_CLS, TOK_CLS, BASE = deberta_v2.FAMILIES
#: weights 10x transformers' init scale: attention logits O(1), so that position terms
#: change the output by far more than the parity tolerance
SHARP = {"initializer_range": 0.2}
#: (position_buckets, max_relative_positions) of the bucket comparison
BUCKETS = [(6, 16), (256, 512), (32, 40)]
#: (family, overrides, sequence): each turns switches away from the v3-style preset
SWITCHES = {
    "separate_keys_c2p": (SEQ_CLS, {"share_att_key": False, "pos_att_type": ["c2p"]}, 9),
    "separate_keys_p2c_string": (TOK_CLS, {"share_att_key": False, "pos_att_type": "p2c"}, 9),
    "v2_absolute_types_unbucketed": (SEQ_CLS, {
        "position_biased_input": True, "type_vocab_size": 2, "position_buckets": -1,
        "max_relative_positions": -1, "norm_rel_ebd": "none", "embedding_size": 48}, 9),
    "no_relative_attention": (TOK_CLS, {"relative_attention": False}, 9),
    "past_the_buckets": (TOK_CLS, {}, 60),
}
#: config.json edits of the base checkpoint, each of which alone must move the logits
MOVES = {"max_relative_positions": {"max_relative_positions": 40},
         "norm_rel_ebd": {"norm_rel_ebd": "none"}, "pos_att_type": {"pos_att_type": ["c2p"]}}
#: the padded batch of the masked-LM checkpoint
MLM_FEEDS = {"input_ids": np.array([[5, 6, 7, 8, 9, 10], [11, 12, 13, 0, 0, 0]]),
             "attention_mask": np.array([[1] * 6, [1, 1, 1, 0, 0, 0]])}
#: "buckets": buckets.npz; "<switch>": ckpt/ + reference.npz; "base": ckpt/ (TOK_CLS,
#: SHARP); "moves_<key>": logits.npz; "mlm": ckpt/ + last_hidden_state.npy
CASES = ["buckets", *sorted(SWITCHES), "base", *(f"moves_{k}" for k in sorted(MOVES)), "mlm"]


def respelled(folder: str, out: str, **changes) -> str:
    """A copy of ``folder`` whose config.json has ``changes``."""
    shutil.copytree(folder, out, copy_function=shutil.copyfile)
    path = os.path.join(out, "config.json")
    with open(path) as f:
        raw = json.load(f)
    raw.update(changes)
    with open(path, "w") as f:
        json.dump(raw, f)
    return out


def moves_mask() -> np.ndarray:
    mask = np.ones((2, 9), np.int64)
    mask[1, 6:] = 0
    return mask


def write_case(case: str, folder: str) -> None:
    from testing import encoder_runs
    from testing.hf_checkpoints import make_hf_checkpoint

    if case == "buckets":
        np.savez(os.path.join(folder, "buckets.npz"), **_buckets())
    elif case == "mlm":
        _write_masked_lm(folder)
    elif case in SWITCHES:
        family, overrides, seq = SWITCHES[case]
        checkpoint = make_hf_checkpoint(os.path.join(folder, "ckpt"), family.tiny_preset,
                                        **SHARP, **overrides)
        encoder_runs.save(encoder_runs.record(checkpoint, seq=seq, pad=seq // 3),
                          os.path.join(folder, "reference.npz"))
    elif case == "base":
        make_hf_checkpoint(os.path.join(folder, "ckpt"), TOK_CLS.tiny_preset, **SHARP)
    else:
        mask = moves_mask()
        ids = np.random.default_rng(0).integers(4, VOCAB_SIZE, size=(2, 9)) * mask
        feeds = {"input_ids": ids, "attention_mask": mask}
        with tempfile.TemporaryDirectory() as tmp:
            base = make_hf_checkpoint(os.path.join(tmp, "base"), TOK_CLS.tiny_preset, **SHARP)
            changed = respelled(base, os.path.join(tmp, "x"),
                                **MOVES[case.removeprefix("moves_")])
            before, after = (encoder_runs.run_reference(f, feeds)["logits"]
                             for f in (base, changed))
        np.savez(os.path.join(folder, "logits.npz"), before=before, after=after)


def _buckets() -> dict[str, np.ndarray]:
    """transformers' bucket per distance, as the row each term reads, per BUCKETS entry."""
    import torch
    from transformers.models.deberta_v2.modeling_deberta_v2 import make_log_bucket_position

    rows = {}
    for buckets, max_position in BUCKETS:
        relative = np.arange(-3 * max_position, 3 * max_position + 1)
        expected = make_log_bucket_position(torch.from_numpy(relative), buckets,
                                            max_position).numpy()
        rows[f"{buckets}_{max_position}"] = np.clip(expected + buckets, 0, 2 * buckets - 1)
    return rows


def _write_masked_lm(folder: str) -> None:
    """ckpt/: a DebertaV2ForMaskedLM (no family of its own), every parameter moved off its
    init value; last_hidden_state.npy: its deberta body on MLM_FEEDS."""
    import torch
    import transformers

    from mobius.tiny.presets import TINY_PRESETS
    from mobius.tiny.tokenizer import write_tiny_tokenizer

    raw = {k: v for k, v in TINY_PRESETS[BASE.tiny_preset].items() if k != "architectures"}
    torch.manual_seed(0)
    model = transformers.DebertaV2ForMaskedLM(transformers.DebertaV2Config(**raw)).eval()
    with torch.no_grad():
        for param in model.parameters():  # biases too: nothing left at its init value
            param.add_(0.05 * torch.randn_like(param))
    checkpoint = os.path.join(folder, "ckpt")
    model.save_pretrained(checkpoint)
    write_tiny_tokenizer(checkpoint, raw["vocab_size"])
    with torch.no_grad():
        expected = model.deberta(**{k: torch.from_numpy(v) for k, v in MLM_FEEDS.items()})
    np.save(os.path.join(folder, "last_hidden_state.npy"), expected.last_hidden_state.numpy())
