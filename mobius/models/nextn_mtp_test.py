"""``--mtp`` on DeepSeek-V3, GLM-4.5 and GLM-4.7-Flash (glm4_moe_lite): the MTP layer
``model.layers.{num_hidden_layers}`` as onnxruntime-genai's drafter (the contract and
genai's side: qwen3_5_mtp_test).

* The head's graph (mtp/model.onnx, f32, onnxruntime) gives the logits and fed-back hidden
  states of the MTP module as DeepSeek-V3 describes it, run in torch from transformers' own
  decoder layer (latent attention / GQA with qk norm, routed experts) and RMSNorm on the
  decoder's final hidden states (nextn_mtp_cases.py). The DeepSeek and GLM-4.7-Flash cases'
  layers ship their own embed_tokens and the GLM-4.5 case's does not: each embedding is
  read where it lives. GLM-4.7-Flash's MTP layer has experts though mlp_layer_types names
  only the decoder layers (the tiny one ends sparse, dense, sparse); a dense one is refused.
* genai (f16): og.MtpGenerator on the package generates plain og.Generator's greedy
  tokens, token for token, with the head drafting every round.
"""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

from mobius.builder import build
from mobius.errors import MobiusError
from mobius.models import nextn_mtp_cases as cases
from testing import mtp_runs
from testing.checkpoint_runs import checkpoint
from testing.reference_cases import case_dir

NEW_TOKENS = 24


def _recorded(case: str) -> dict:
    return dict(np.load(os.path.join(case_dir(cases, case), "mtp.npz")))


def _edited(case: str, folder: str, tensors, config: dict) -> str:
    """A copy of the case's checkpoint with ``tensors(dict) -> dict`` and ``config``
    applied."""
    shutil.copytree(checkpoint(cases, case), folder)
    path = os.path.join(folder, "model.safetensors")
    save_file(tensors(load_file(path)), path, metadata={"format": "pt"})
    with open(os.path.join(folder, "config.json")) as f:
        raw = json.load(f)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump({**raw, **config}, f)
    return folder


def _moved(tensors: dict, source: str, target: str) -> dict:
    """``tensors`` with those under ``source`` copied (plus 1) under ``target``, whose own
    tensors are dropped first."""
    kept = {k: v for k, v in tensors.items() if not k.startswith(target)}
    return {**kept, **{target + k[len(source):]: v + 1
                       for k, v in tensors.items() if k.startswith(source)}}


def _second_layer(decoder_layers: int):
    """A second MTP module (layer decoder_layers + 1), its tensors the first's plus 1."""
    first, second = f"model.layers.{decoder_layers}.", f"model.layers.{decoder_layers + 1}."
    return (lambda tensors: _moved(tensors, first, second), {"num_nextn_predict_layers": 2})


@pytest.mark.parametrize("case, edit", [
    *(pytest.param(c, None, id=c) for c in cases.CASES),
    # of two MTP modules the first is the drafter (genai drafts with one head); real
    # DeepSeek-V3 and GLM-4.7-Flash configs have one
    pytest.param("deepseek_v3", _second_layer(2), id="deepseek_v3_two_mtp_layers"),
    pytest.param("glm4_moe_lite", _second_layer(3), id="glm4_moe_lite_two_mtp_layers"),
])
def test_head_matches_the_published_module(tmp_path, case, edit):
    recorded = _recorded(case)
    ckpt = checkpoint(cases, case) if edit is None else _edited(case, str(tmp_path / "c"), *edit)
    mtp_runs.assert_head_matches(build(ckpt, mtp=True).save(str(tmp_path / "f32")), recorded)


@pytest.mark.parametrize("case", cases.CASES)
def test_speculative_greedy_equals_plain_greedy(tmp_path, case):
    package = build(checkpoint(cases, case), dtype="f16", mtp=True).save(str(tmp_path / "f16"))
    mtp_runs.assert_speculative_equals_plain(package, _recorded(case)["prompt"][0], NEW_TOKENS)


@pytest.mark.parametrize("case, decoder_layers", [("deepseek_v3", 2), ("glm4_moe_lite", 3)])
def test_mtp_needs_the_mtp_layer(tmp_path, case, decoder_layers):
    """Without the layer (num_nextn_predict_layers 0, as the tiny preset) --mtp is refused
    before anything is built; the plain build still reads the checkpoint."""
    layer = f"model.layers.{decoder_layers}."
    folder = _edited(case, str(tmp_path / "no_mtp"), lambda tensors: {
        k: v for k, v in tensors.items() if not k.startswith(layer)},
        {"num_nextn_predict_layers": 0})
    with pytest.raises(MobiusError, match=rf"no model\.layers\.{decoder_layers}\.\* tensors"):
        build(folder, mtp=True)
    assert build(folder).config.num_hidden_layers == decoder_layers


def test_glm4_moe_lite_refuses_a_dense_mtp_layer(tmp_path):
    """GLM-4.7-Flash's MTP layer is built with experts whatever mlp_layer_types ends with:
    one holding dense layer 1's MLP instead is refused, naming the expert tensor it lacks;
    the plain build, which leaves the layer unread, still builds."""
    folder = _edited("glm4_moe_lite", str(tmp_path / "dense_mtp"), lambda tensors: _moved(
        tensors, "model.layers.1.mlp.", "model.layers.3.mlp."), {})
    with pytest.raises(MobiusError, match=r"missing tensor 'model\.layers\.3\.mlp\."):
        build(folder, mtp=True)
    assert build(folder).config.num_hidden_layers == 3
