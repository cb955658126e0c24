"""Gemma 4's audio tower and embedder (mobius/models/gemma4_audio.py) vs transformers'
Gemma4AudioModel + Gemma4MultimodalEmbedder, f32 (gemma4_audio_cases.py: every
parameter random, clip bounds active, two clips, the second padded): the real soft
tokens within 1e-4 of the largest one (tokens are O(5); measured <= 3.3e-5 of it).
Each switch case, reverted on the same weights, moves the tokens; values transformers
cannot run are refused.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest

from mobius.context import build_context
from mobius.errors import ConfigError, MobiusError
from mobius.models import gemma4_audio_cases as cases
from mobius.models.gemma4_audio import Gemma4AudioEncoder, audio_options
from testing.onnx_graphs import attach_arrays, component_model, run_model
from testing.recorded_arrays import load

TOLERANCE = 1e-4


def _tokens(config: dict, recorded: dict, folder) -> np.ndarray:
    with build_context(None, ir.DataType.FLOAT):
        encoder = Gemma4AudioEncoder(audio_options(config), cases.TEXT_HIDDEN)
    weights = {k: v for k, v in recorded.items() if k.startswith(("audio_tower.", "embed_"))}
    attach_arrays(encoder, weights, folder)
    model = component_model(
        [("features", ir.DataType.FLOAT, ["b", "t", cases.MEL]),
         ("mask", ir.DataType.BOOL, ["b", "t"])],
        encoder, [("tokens", ["n", cases.TEXT_HIDDEN])])
    (tokens,) = run_model(model, {"features": recorded["features"], "mask": recorded["mask"]})
    return tokens


@pytest.mark.parametrize("case", cases.CASES)
def test_real_soft_tokens_match_transformers(case, tmp_path):
    recorded = load(cases, case)
    tokens = _tokens(cases.config(case), recorded, tmp_path)
    expected = recorded["tokens"]
    assert tokens.shape == expected.shape, (tokens.shape, expected.shape)
    assert np.abs(tokens - expected).max() <= TOLERANCE * np.abs(expected).max()
    assert np.abs(expected).mean() > 0.1


#: (case, the audio_config edit that reverts one of its switches)
REVERTS = {
    "clipped": ("default", {"use_clipped_linears": False}),
    "act": ("plain", {"hidden_act": "silu"}),
    "kernel": ("plain", {"conv_kernel_size": 3}),
    "cap": ("default", {"attention_logit_cap": 50.0}),
    "gradient_clipping": ("default", {"gradient_clipping": 1e10}),
    "future": ("future", {"attention_context_right": 0}),
    "chunk": ("future", {"attention_chunk_size": 4}),
    "left": ("default", {"attention_context_left": 3}),
    "residual_weight": ("default", {"residual_weight": 0.5}),
    "eps": ("default", {"rms_norm_eps": 1e-1}),
}


@pytest.mark.parametrize("name", sorted(REVERTS))
def test_reverting_a_switch_changes_the_tokens(name, tmp_path):
    case, edit = REVERTS[name]
    recorded = load(cases, case)
    try:
        tokens = _tokens({**cases.config(case), **edit}, recorded, tmp_path)
    except MobiusError as error:  # the reverted tower needs tensors the checkpoint lacks
        assert "tensor" in str(error) or "shape" in str(error), error
        return
    assert np.abs(tokens - recorded["tokens"]).max() > 1e-2, name


REJECTED = {
    "three_convs": ({"subsampling_conv_channels": [8, 4, 4]}, "subsampling_conv_channels"),
    "heads": ({"num_attention_heads": 3}, "num_attention_heads"),
    "left": ({"attention_context_left": 0}, "attention_context_left"),
}


@pytest.mark.parametrize("name", sorted(REJECTED))
def test_unsupported_values_are_rejected(name):
    edit, words = REJECTED[name]
    with pytest.raises(ConfigError, match=words):
        audio_options({**cases.BASE, **edit})
