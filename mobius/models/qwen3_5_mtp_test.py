"""``--mtp`` on Qwen 3.5: the multi-token-prediction head as onnxruntime-genai's drafter.

* The head's graph (mtp/model.onnx, f32, onnxruntime) gives the logits and fed-back hidden
  states of transformers' own parts (its decoder layer, (1 + w) RMSNorm and RoPE) run on
  the decoder's final hidden states: a drafter bug shows here, where genai's output
  cannot show it (speculative greedy equals plain greedy whatever the drafts).
* genai (f16: genai 0.18's MtpGenerator fails on f32 packages with "Cast - input and
  output types are the same"): the decoder's ``hidden_states`` output is transformers'
  final normed hidden state, and og.MtpGenerator on the package generates plain
  og.Generator's greedy tokens, token for token, with the head drafting every round.
"""

from __future__ import annotations

import json
import os

import numpy as np
import onnxruntime_genai as og
import pytest

from mobius.builder import build
from mobius.errors import MobiusError
from mobius.models import qwen3_5_cases as cases
from testing import mtp_runs
from testing.checkpoint_runs import checkpoint
from testing.reference_cases import case_dir

NEW_TOKENS = 48


@pytest.fixture(scope="module")
def recorded():
    return dict(np.load(os.path.join(case_dir(cases, "mtp"), "mtp.npz")))


@pytest.fixture(scope="module")
def f16_package(tmp_path_factory):
    folder = str(tmp_path_factory.mktemp("mtp") / "f16")
    build(checkpoint(cases, "mtp"), dtype="f16", mtp=True).save(folder)
    return folder


def test_head_matches_transformers_parts(tmp_path, recorded):
    folder = build(checkpoint(cases, "mtp"), mtp=True).save(str(tmp_path / "f32"))
    mtp_runs.assert_head_matches(folder, recorded)
    with open(os.path.join(folder, "genai_config.json")) as f:
        assert json.load(f)["model"]["mtp"]["filename"] == "mtp/model.onnx"


def test_decoder_hands_genai_the_final_hidden_states(f16_package, recorded):
    model = og.Model(f16_package)
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=32, do_sample=False)
    generator = og.Generator(model, params)
    generator.append_tokens(recorded["prompt"][0].astype(np.int32))
    hidden = np.asarray(generator.get_output("hidden_states"), np.float32)
    np.testing.assert_allclose(hidden[0, :-1], recorded["hidden_states"][0], atol=3e-2, rtol=0)


def test_speculative_greedy_equals_plain_greedy(f16_package, recorded):
    mtp_runs.assert_speculative_equals_plain(f16_package, recorded["prompt"][0], NEW_TOKENS)


def test_mtp_needs_a_head_and_every_logits_row(tmp_path):
    with pytest.raises(MobiusError, match="no mtp"):
        build(checkpoint(cases, "base"), mtp=True)
    with pytest.raises(MobiusError, match="--mtp"):
        build(checkpoint(cases, "mtp"), mtp=True, prefill_logits="last")
