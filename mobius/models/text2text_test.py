"""L1 for the text2text families without torch: config.json switches that cannot be
built are refused with one clear line before anything is written; the decoder's
metadata carries the ids a generation loop needs; tied heads read the decoder's
own copy of the token table (no second matrix)."""

from __future__ import annotations

import json
import os

import pytest

import mobius
from mobius.errors import ConfigError
from mobius.tiny.checkpoint import make_tiny_checkpoint


def _checkpoint(tmp_path, preset: str, **overrides) -> str:
    folder = make_tiny_checkpoint(preset, str(tmp_path / preset))
    path = os.path.join(folder, "config.json")
    with open(path) as f:
        raw = json.load(f)
    with open(path, "w") as f:
        json.dump({**raw, **overrides}, f)
    return folder


@pytest.mark.parametrize("preset,overrides,message", [
    ("tiny-t5", {"feed_forward_proj": "gelu-gated"}, "feed_forward_proj 'gelu-gated'"),
    ("tiny-t5", {"feed_forward_proj": "gated-tanhh"}, "activation 'tanhh' is not supported"),
    ("tiny-t5", {"relative_attention_num_buckets": 2}, "at least 4"),
    ("tiny-mt5", {"relative_attention_max_distance": 4}, "must exceed"),
    ("tiny-t5", {"relative_attention_num_buckets": True}, "must be an integer"),
    ("tiny-bart", {"encoder_attention_heads": 5}, "not divisible by encoder_attention_heads"),
    ("tiny-marian", {"share_encoder_decoder_embeddings": False}, "not supported"),
])
def test_bad_config_is_one_clear_error_and_writes_nothing(tmp_path, preset, overrides, message):
    folder = _checkpoint(tmp_path, preset, **overrides)
    out = tmp_path / "out"
    with pytest.raises(ConfigError, match=message) as error:
        mobius.build(folder).save(str(out))
    assert "\n" not in str(error.value)
    assert not out.exists()


@pytest.mark.parametrize("preset,start,eos,pad", [("tiny-t5", "0", "2", "0"),
                                                   ("tiny-bart", "2", "2", "0")])
def test_decoder_metadata_and_tied_head(tmp_path, preset, start, eos, pad):
    package = mobius.build(make_tiny_checkpoint(preset, str(tmp_path / preset)))
    decoder = package.models["decoder"]
    meta = decoder.metadata_props
    assert (meta["decoder_start_token_id"], meta["eos_token_id"], meta["pad_token_id"]) == (
        start, eos, pad)
    assert not any("lm_head.weight" in name for name in decoder.graph.initializers)
    assert any("decoder.embed_tokens.weight" in name for name in decoder.graph.initializers)


def test_marian_reads_no_saved_sinusoids(tmp_path):
    """Older opus-mt files hold the sinusoid tables; the build computes them instead."""
    import numpy as np
    from safetensors.numpy import load_file, save_file

    folder = make_tiny_checkpoint("tiny-marian", str(tmp_path / "marian"))
    path = os.path.join(folder, "model.safetensors")
    tensors = load_file(path)
    for stack in ("encoder", "decoder"):
        tensors[f"model.{stack}.embed_positions.weight"] = np.zeros((40, 48), np.float32)
    save_file(tensors, path)
    decoder = mobius.build(folder).models["decoder"]  # the unread tables are not an error
    (table,) = [v.const_value.numpy() for name, v in decoder.graph.initializers.items()
                if "embed_positions" in name]
    assert table.shape == (40, 48) and np.abs(table[1:]).max() > 0.5  # computed, not the zeros
