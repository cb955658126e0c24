"""DeBERTa-v2 (mobius/models/deberta_v2.py): the position buckets equal transformers' for
every distance, each attention / embedding switch keeps f32 parity where it matters,
a sequence past the bucket range keeps parity, and unsupported configs are one-line
errors. The tiny presets (DeBERTa-v3 style) at sequence 9: encoder_parity_test.py."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

import torch

from mobius import build
from mobius.errors import ConfigError, UnsupportedModelError
from mobius.models import deberta_v2
from mobius.models.registry import family_for
from mobius.tiny.bases import VOCAB_SIZE
from testing.encoder_runs import encoder_parity, run_reference
from testing.model_runs import build_package, make_family_checkpoint, ort_session

SEQ_CLS, TOK_CLS, BASE = deberta_v2.FAMILIES
#: weights 10x transformers' init scale: attention logits O(1), so that position terms
#: change the output by far more than the parity tolerance
SHARP = {"initializer_range": 0.2}


@pytest.mark.parametrize("buckets,max_position", [(6, 16), (256, 512), (32, 40)])
def test_buckets_equal_transformers_for_every_distance(buckets, max_position):
    from transformers.models.deberta_v2.modeling_deberta_v2 import make_log_bucket_position

    relative = np.arange(-3 * max_position, 3 * max_position + 1)
    expected = make_log_bucket_position(torch.from_numpy(relative), buckets, max_position).numpy()
    expected = np.clip(expected + buckets, 0, 2 * buckets - 1)  # the row each term reads
    table = deberta_v2.bucket_table(buckets, max_position)
    ours = np.sign(relative) * table[np.minimum(np.abs(relative), len(table) - 1)]
    np.testing.assert_array_equal(np.clip(ours + buckets, 0, 2 * buckets - 1), expected)


#: (family, overrides, sequence): each turns switches away from the v3-style preset
CASES = {
    "separate_keys_c2p": (SEQ_CLS, {"share_att_key": False, "pos_att_type": ["c2p"]}, 9),
    "separate_keys_p2c_string": (TOK_CLS, {"share_att_key": False, "pos_att_type": "p2c"}, 9),
    "v2_absolute_types_unbucketed": (SEQ_CLS, {
        "position_biased_input": True, "type_vocab_size": 2, "position_buckets": -1,
        "max_relative_positions": -1, "norm_rel_ebd": "none", "embedding_size": 48}, 9),
    "no_relative_attention": (TOK_CLS, {"relative_attention": False}, 9),
    "past_the_buckets": (TOK_CLS, {}, 60),
}


def test_masked_lm_checkpoint_builds_as_the_base_model(tmp_path):
    """A DebertaV2ForMaskedLM checkpoint (no family of its own) resolves by model_type to the
    base model: its ``deberta.`` body is read, its MLM head is declared ignorable, and the
    hidden states match transformers' body on a padded batch."""
    import transformers

    from mobius.tiny.presets import TINY_PRESETS
    from mobius.tiny.tokenizer import write_tiny_tokenizer

    raw = {k: v for k, v in TINY_PRESETS[BASE.tiny_preset].items() if k != "architectures"}
    torch.manual_seed(0)
    model = transformers.DebertaV2ForMaskedLM(transformers.DebertaV2Config(**raw)).eval()
    with torch.no_grad():
        for param in model.parameters():  # biases too: nothing left at its init value
            param.add_(0.05 * torch.randn_like(param))
    folder = str(tmp_path / "mlm")
    model.save_pretrained(folder)
    write_tiny_tokenizer(folder, raw["vocab_size"])
    with open(os.path.join(folder, "config.json")) as f:
        assert family_for(json.load(f)) is BASE
    path = build(folder).save(str(tmp_path / "onnx"))
    session = ort_session(os.path.join(path, "model.onnx"))
    feeds = {"input_ids": np.array([[5, 6, 7, 8, 9, 10], [11, 12, 13, 0, 0, 0]]),
             "attention_mask": np.array([[1] * 6, [1, 1, 1, 0, 0, 0]])}
    (hidden,) = session.run(None, feeds)
    with torch.no_grad():
        expected = model.deberta(**{k: torch.from_numpy(v) for k, v in feeds.items()})
    real = feeds["attention_mask"].astype(bool)
    diff = np.abs(hidden - expected.last_hidden_state.numpy())[real].max()
    assert diff <= 1e-4, diff


@pytest.mark.parametrize("case", sorted(CASES))
def test_switch_parity(case, tmp_path):
    family, overrides, seq = CASES[case]
    folder = make_family_checkpoint(str(tmp_path / "ckpt"), family, **SHARP, **overrides)
    built = build_package(folder, tmp_path / "onnx")
    run = encoder_parity(ort_session(os.path.join(built.path, "model.onnx")), folder,
                         built.config, seq=seq, pad=seq // 3)
    assert run.diffs["logits"] <= 1e-4, f"{case}: {run.diffs}"


def _respelled(folder: str, out: str, **changes) -> str:
    shutil.copytree(folder, out)
    path = os.path.join(out, "config.json")
    with open(path) as f:
        raw = json.load(f)
    raw.update(changes)
    with open(path, "w") as f:
        json.dump(raw, f)
    return out


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    return make_family_checkpoint(str(tmp_path_factory.mktemp("deberta") / "ckpt"), TOK_CLS,
                                  **SHARP)


@pytest.mark.parametrize("changes", [{"max_relative_positions": 40},
                                     {"norm_rel_ebd": "none"}, {"pos_att_type": ["c2p"]}],
                         ids=lambda c: next(iter(c)))
def test_each_value_moves_the_output(changes, base, tmp_path):
    """Each preset value matters on this batch: changing it alone moves transformers'
    logits far beyond the parity tolerance. (position_buckets sizes the table; its
    bucketing is checked against transformers' above.)"""
    mask = np.ones((2, 9), np.int64)
    mask[1, 6:] = 0
    ids = np.random.default_rng(0).integers(4, VOCAB_SIZE, size=(2, 9)) * mask
    feeds = {"input_ids": ids, "attention_mask": mask}
    before, after = (run_reference(f, feeds, ["logits"])["logits"]
                     for f in (base, _respelled(base, str(tmp_path / "x"), **changes)))
    assert np.abs(before - after)[mask > 0].max() > 1e-2


@pytest.mark.parametrize("changes,error,match", [
    ({"conv_kernel_size": 3}, UnsupportedModelError, "conv_kernel_size"),
    ({"pos_att_type": ["p2p"]}, UnsupportedModelError, "pos_att_type"),
    ({"max_relative_positions": 3}, ConfigError, "must exceed"),
    ({"share_att_key": "yes"}, ConfigError, "share_att_key"),
])
def test_unsupported_configs_are_one_line_errors(changes, error, match, base, tmp_path):
    with pytest.raises(error, match=match):
        build(_respelled(base, str(tmp_path / "bad"), **changes))
