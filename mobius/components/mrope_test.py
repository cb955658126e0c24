"""MRotaryEmbedding: 3 position streams -> cos/sin, each frequency section rotating by
its stream (k % 3), checked against a numpy statement of transformers' recomposition
(Qwen2_5_VLRotaryEmbedding: split the frequencies by mrope_section, chunk k from stream
k % 3), and of Qwen3-VL's interleaved one (Qwen3VLTextRotaryEmbedding: start from
stream 0, frequencies 1, 4, 7, ... below 3 * section[1] from stream 1, 2, 5, ... below
3 * section[2] from stream 2); bad sections fail clearly."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest

from mobius.components.mrope import MRotaryEmbedding, stream_of_frequency
from mobius.config.rope import RopeConfig
from mobius.context import build_context
from mobius.errors import ConfigError
from testing.onnx_graphs import component_model, run_model

ROPE = RopeConfig(theta=10000.0, rotary_dim=16, max_position_embeddings=64)


def _reference(positions: np.ndarray, section, interleaved=False) -> tuple[np.ndarray, np.ndarray]:
    inv = ROPE.inv_freq().astype(np.float32)
    angles = positions[..., None].astype(np.float32) * inv  # [3, batch, seq, 8]
    if interleaved:
        picked = angles[0].copy()
        for stream in (1, 2):
            taken = slice(stream, 3 * section[stream], 3)
            picked[..., taken] = angles[stream][..., taken]
    else:
        chunks = np.split(angles, np.cumsum(section)[:-1], axis=-1)
        picked = np.concatenate([chunk[k % 3] for k, chunk in enumerate(chunks)], axis=-1)
    return np.cos(picked), np.sin(picked)


@pytest.mark.parametrize("section,interleaved", [
    ([2, 3, 3], False), ([4, 2, 2], False), ([1, 2, 2, 3], False),
    ([2, 3, 3], True), ([4, 2, 2], True), ([6, 1, 1], True)])
def test_each_section_rotates_by_its_stream(section, interleaved):
    with build_context(None, ir.DataType.FLOAT):
        module = MRotaryEmbedding(ROPE, section, interleaved=interleaved)
        model = component_model(
            inputs=[("position_ids", ir.DataType.INT64, [3, "batch", "seq"])],
            forward=lambda op, pos: module(op, pos), outputs=["cos", "sin"])
    positions = np.random.default_rng(0).integers(0, 64, size=(3, 2, 5)).astype(np.int64)
    cos, sin = run_model(model, {"position_ids": positions})
    ref_cos, ref_sin = _reference(positions, section, interleaved)
    np.testing.assert_allclose(cos, ref_cos, atol=1e-6)
    np.testing.assert_allclose(sin, ref_sin, atol=1e-6)
    # equal streams (text tokens) give plain RoPE
    same = np.repeat(positions[:1], 3, axis=0)
    cos, _ = run_model(model, {"position_ids": same})
    np.testing.assert_allclose(cos, np.cos(same[0][..., None] * ROPE.inv_freq()), atol=1e-6)


@pytest.mark.parametrize("section", [[2, 3, 4], [], [8, 0], [-1, 9]])
def test_sections_must_cover_the_frequencies(section):
    with pytest.raises(ConfigError, match="mrope_section"):
        stream_of_frequency(section, 8)
