"""GgufCheckpoint on GGUF files written here with gguf's own writer and quantizer:
names mapped back, q/k permutation undone, Q4_0 / Q8_0 integers that dequantize
exactly to gguf's dequantization, rows read alone, float bytes read as stored."""

from __future__ import annotations

import gguf
import numpy as np
import pytest

from mobius.errors import WeightsError
from mobius.weights.gguf_checkpoint import GgufCheckpoint

HEADS, KV_HEADS, HIDDEN = 4, 2, 64
RAW = {"num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS}


def _permute(w: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's q/k row order (each head's rotary halves interleaved)."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(
        w.shape)


@pytest.fixture(scope="module")
def weights():
    rng = np.random.default_rng(0)
    return {"q": rng.standard_normal((HIDDEN, HIDDEN)).astype(np.float32),
            "k": rng.standard_normal((HIDDEN // 2, HIDDEN)).astype(np.float32),
            "down": rng.standard_normal((HIDDEN, 96)).astype(np.float32),
            "norm": rng.standard_normal(HIDDEN).astype(np.float32)}


def _write(path: str, weights: dict, qtype: str) -> GgufCheckpoint:
    kind = gguf.GGMLQuantizationType[qtype]
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_tensor("blk.0.attn_q.weight",
                      gguf.quants.quantize(_permute(weights["q"], HEADS), kind), raw_dtype=kind)
    writer.add_tensor("blk.0.attn_k.weight",
                      gguf.quants.quantize(_permute(weights["k"], KV_HEADS), kind), raw_dtype=kind)
    writer.add_tensor("blk.0.ffn_down.weight", gguf.quants.quantize(weights["down"], kind),
                      raw_dtype=kind)
    writer.add_tensor("blk.0.attn_norm.weight", weights["norm"])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return GgufCheckpoint(path, gguf.GGUFReader(path), "llama", RAW, lambda name: 4 if
                          qtype == "Q4_0" else 8)


@pytest.mark.parametrize("qtype", ["Q4_0", "Q8_0"])
def test_integers_dequantize_exactly_to_gguf_dequantization(tmp_path, weights, qtype):
    checkpoint = _write(str(tmp_path / "m.gguf"), weights, qtype)
    kind = gguf.GGMLQuantizationType[qtype]
    for hf, key in (("model.layers.0.self_attn.q_proj.weight", "q"),
                    ("model.layers.0.self_attn.k_proj.weight", "k"),
                    ("model.layers.0.mlp.down_proj.weight", "down")):
        # q/k: quantizing rows then reordering them = reordering then quantizing
        expected = gguf.quants.dequantize(gguf.quants.quantize(weights[key], kind), kind)
        packed = checkpoint.packed(hf)
        assert (packed.bits, packed.block_size, packed.symmetric) == (
            4 if qtype == "Q4_0" else 8, 32, True)
        qw = checkpoint.quantized(hf)
        assert qw.zero_points is None  # implicit 8 / 128
        np.testing.assert_array_equal(qw.dequantize(), expected)
        np.testing.assert_array_equal(checkpoint.read(hf), expected)
        np.testing.assert_array_equal(checkpoint.read_rows(hf, 3, 17), expected[3:17])
        assert not checkpoint.is_stored_as_read(hf)


def test_float_tensor_is_read_as_stored(tmp_path, weights):
    checkpoint = _write(str(tmp_path / "m.gguf"), weights, "Q8_0")
    name = "model.layers.0.input_layernorm.weight"
    assert checkpoint.is_stored_as_read(name) and checkpoint.packed(name) is None
    info = checkpoint.info(name)
    with open(info.path, "rb") as f:
        f.seek(info.begin)
        stored = np.frombuffer(f.read(info.end - info.begin), np.float32)
    np.testing.assert_array_equal(stored, weights["norm"])
    np.testing.assert_array_equal(checkpoint.read(name), weights["norm"])


def test_integers_kept_only_for_the_bits_the_build_asks(tmp_path, weights):
    path = str(tmp_path / "m.gguf")
    _write(path, weights, "Q4_0")
    int8 = GgufCheckpoint(path, gguf.GGUFReader(path), "llama", RAW, lambda name: 8)
    assert int8.packed("model.layers.0.mlp.down_proj.weight") is None
    float_build = GgufCheckpoint(path, gguf.GGUFReader(path), "llama", RAW)
    assert float_build.packed("model.layers.0.mlp.down_proj.weight") is None


def test_unmapped_tensor_is_refused_by_name(tmp_path):
    path = str(tmp_path / "m.gguf")
    writer = gguf.GGUFWriter(path, "llama")
    writer.add_tensor("rope_freqs.weight", np.ones(16, np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(WeightsError, match="GGUF tensor 'rope_freqs.weight' has no Hugging Face"):
        GgufCheckpoint(path, gguf.GGUFReader(path), "llama", RAW)
