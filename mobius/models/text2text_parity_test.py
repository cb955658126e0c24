"""L3: the two-model text2text packages (t5, mt5, bart) vs transformers' *ForConditionalGeneration.

Checkpoints are written by transformers itself (testing/hf_checkpoints.py, every
constant parameter and every all-zero tensor, such as BART's final_logits_bias,
re-randomized). A right-padded batch of two sources (lengths 9
and 6) and two different 4-token decoder prompts run through the package as a
generation loop chains it -- encoder once; decoder prefill with an empty self
cache, then 3 steps on transformers' greedy tokens feeding ``present_*_self_*`` back
and the encoder's ``present_*_cross_*`` unchanged -- and through transformers with its
cache (recorded at build time: text2text_parity_cases.py).
Compared, each to 1e-4 in f32: encoder_hidden_states, every cross K/V, logits at
every prefill position and step, and the self-attention presents.

Each config switch the family reads has a case where it matters: ReLU vs
gated-gelu / gated-silu feed-forward; tied head (t5: scaled by d_model**-0.5;
mt5: not) vs an untied ``lm_head.weight`` (the layout of flan-t5 / mT5 hub
checkpoints, which transformers 5 only writes by hand); relative_attention
num_buckets / max_distance (8 / 6 and 16 / 10: the exact, logarithmic and
saturated buckets all occur at these lengths, both directions); num_decoder_layers
!= num_layers; d_kv * heads != d_model. BART: scale_embedding on / off, tied / untied
head (final_logits_bias in both), encoder heads and layers != the decoder's, the +2
position offset (a wrong offset reads other rows of the random position table).
Marian: sinusoidal positions (computed, never in the checkpoint), no embedding norm,
swish, decoder heads != encoder heads. (The bucket table and the bias
graph are checked against transformers in mobius/components/relative_position_test.py.)
The cpu EP's fused build keeps f32 parity; f16 / bf16 builds run on onnxruntime's
CPU EP against the f32 reference.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from mobius.builder import build
from mobius.models import text2text_parity_cases as cases
from mobius.models.text2text_parity_cases import CASES, PROMPT, STEPS, inputs
from testing import seq2seq_reference
from testing.model_runs import ort_session
from testing.parity import run_session
from testing.reference_cases import case_dir

F32_TOLERANCE = 1e-4


def _recorded(case: str):
    """The case's checkpoint folder and transformers' recorded run (text2text_parity_cases)."""
    folder = case_dir(cases, case)
    with open(os.path.join(folder, "tied.json")) as f:
        assert json.load(f) != bool(CASES[case][2]), case  # the case is what it says
    with np.load(os.path.join(folder, "reference.npz")) as data:
        return os.path.join(folder, "ckpt"), {k: data[k] for k in data.files}


class Package:
    """The saved package's two onnxruntime sessions, driven as a generation loop does."""

    def __init__(self, path: str, config):
        self.config = config
        self.encoder = ort_session(os.path.join(path, "encoder.onnx"))
        self.decoder = ort_session(os.path.join(path, "decoder.onnx"))

    def generate(self, input_ids, mask, prompt, steps: int, tokens=None):
        """(per-step logits, per-step self presents, chosen tokens, encoder outputs)."""
        names = [o.name for o in self.encoder.get_outputs()]
        encoded = dict(zip(names, run_session(
            self.encoder, {"input_ids": input_ids, "attention_mask": mask})))
        layers, heads, dim = (self.config.num_hidden_layers, self.config.num_attention_heads,
                              self.config.head_dim)
        kinds = [(kind, i) for i in range(layers) for kind in ("key", "value")]
        cross = {f"past_{k}_cross_{i}": encoded[f"present_{k}_cross_{i}"] for k, i in kinds}
        dtype = encoded["encoder_hidden_states"].dtype
        past = {f"past_{k}_self_{i}": np.zeros((len(prompt), heads, 0, dim), dtype)
                for k, i in kinds}
        names = [o.name for o in self.decoder.get_outputs()]
        logits, presents, chosen, ids = [], [], [], prompt
        for step in range(steps + 1):
            out = dict(zip(names, run_session(
                self.decoder, {"input_ids": ids, "encoder_attention_mask": mask, **past, **cross})))
            logits.append(out["logits"].astype(np.float32))
            presents.append([out[f"present_{k}_self_{i}"] for k, i in kinds])
            past = {f"past_{k}_self_{i}": out[f"present_{k}_self_{i}"] for k, i in kinds}
            if step == steps:
                break
            ids = (tokens[step] if tokens is not None
                   else out["logits"][:, -1].argmax(-1)[:, None].astype(np.int64))
            chosen.append(ids)
        return logits, presents, chosen, encoded


def _max_diff(a_list, b_list) -> float:
    return max(float(np.abs(a - b).max()) for a, b in zip(a_list, b_list, strict=True))


def _compare(tmp_path, case, dtype="f32", ep="default"):
    """The package driven on transformers' greedy tokens, against transformers' run."""
    folder, reference = _recorded(case)
    package = build(folder, dtype=dtype, execution_provider=ep)
    onnx = Package(package.save(str(tmp_path / "pkg")), package.config)
    ids, mask, prompt = inputs(package.config.vocab_size)
    for name, value in zip(("ids", "mask", "prompt"), (ids, mask, prompt)):
        np.testing.assert_array_equal(reference[name], value, err_msg=name)
    layers = package.config.num_hidden_layers
    states, cross, hf_logits, hf_presents, tokens = seq2seq_reference.unpack(
        reference, layers, STEPS)
    logits, presents, _, encoded = onnx.generate(ids, mask, prompt, STEPS, tokens)
    onnx_cross = [encoded[f"present_{kind}_cross_{i}"].astype(np.float32)
                  for i in range(layers) for kind in ("key", "value")]
    diffs = {
        "encoder_hidden_states": float(np.abs(
            encoded["encoder_hidden_states"].astype(np.float32) - states).max()),
        "cross_kv": _max_diff(onnx_cross, cross),
        "logits": _max_diff(logits, hf_logits),
        "self_kv": max(_max_diff([p.astype(np.float32) for p in a], b)
                       for a, b in zip(presents, hf_presents, strict=True)),
    }
    scales = {"encoder_hidden_states": float(np.abs(states).max()),
              "cross_kv": max(float(np.abs(c).max()) for c in cross),
              "logits": max(float(np.abs(x).max()) for x in hf_logits),
              "self_kv": max(float(np.abs(t).max()) for p in hf_presents for t in p)}
    print(f"{case} {dtype}: max |onnx - transformers| {diffs}")
    return diffs, scales, logits


@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_transformers(tmp_path, case):
    diffs, _, logits = _compare(tmp_path, case)
    assert all(d <= F32_TOLERANCE for d in diffs.values()), diffs
    assert logits[0].shape[:2] == (2, PROMPT) and all(s.shape[1] == 1 for s in logits[1:])


@pytest.mark.parametrize("case", ["t5_gated_untied", "bart_tied_scaled", "marian_tied"])
def test_cpu_build_matches_transformers(tmp_path, case):
    """The cpu EP's fused graphs (SkipSimplifiedLayerNormalization for T5's pre-norm;
    SkipLayerNormalization and BiasGelu for BART's post-norm; the encoders' attention a
    MultiHeadAttention, T5's with its position bias and scale 1) keep f32 parity."""
    diffs, _, _ = _compare(tmp_path, case, ep="cpu")
    assert all(d <= F32_TOLERANCE for d in diffs.values()), diffs


# f16 / bf16: |onnx_lowp - reference_f32| <= 4 * eps(dtype) * max(1, max|ref|) per output,
# as the encoder families. f16 rounds every weight and activation; bf16 (the default EP
# computes bf16 builds in float32 where ORT lacks kernels) rounds weights and outputs.
# RMS-normalized residual streams keep the error from growing with the tiny depth.
# Measured: 0.72-1.08 eps on encoder states and K/V, 1.16 (f16) / 1.28 (bf16) eps on
# logits after 3 cached steps, so 4 eps leaves 3x headroom; a wrong bucket, mask or
# head is off by O(0.1) of the output scale.
EPS = {"f16": 2.0**-10, "bf16": 2.0**-7}


@pytest.mark.parametrize("case", ["t5_gated_untied", "bart_tied_scaled"])
@pytest.mark.parametrize("dtype", sorted(EPS))
def test_low_precision_close_to_f32_reference(tmp_path, dtype, case):
    diffs, scales, logits = _compare(tmp_path, case, dtype)
    assert all(np.isfinite(step).all() for step in logits)
    print(case, dtype, {n: round(d / (EPS[dtype] * max(1.0, scales[n])), 2) for n, d in diffs.items()},
          "eps of max(1, |ref|)")
    for name, diff in diffs.items():
        atol = 4 * EPS[dtype] * max(1.0, scales[name])
        assert diff <= atol, f"{case} {dtype} {name}: {diff:.3g} > {atol:.3g} ({diff / atol * 8:.2f} eps)"
