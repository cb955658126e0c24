"""L3: the two-model Whisper package vs transformers' WhisperForConditionalGeneration, f32.

Checkpoints are written by transformers itself (testing/hf_checkpoints.py) from
the tiny-whisper preset plus per-case overrides, with every bias and both
position tables re-randomized (transformers initializes biases to 0, so a
dropped bias would otherwise pass). One batch of two different log-mel inputs
and two different 4-token decoder prompts is run through the package the way
onnxruntime-genai chains it -- encoder once; decoder prefill with an empty self
cache, then 3 decode steps on transformers' greedy tokens that feed ``present_*_self_*`` back as
``past_*_self_*`` (the self cache grows 4 -> 7) and the encoder's
``present_*_cross_*`` unchanged as ``past_*_cross_*`` -- and through
transformers with its EncoderDecoderCache (recorded at build time:
whisper_parity_cases.py). Compared, each to 1e-4:

* encoder_hidden_states vs ``model.model.encoder(...)``;
* every cross K/V vs the decoder layers' ``encoder_attn.k_proj`` / ``v_proj`` of
  the encoder states (what transformers caches in its cross-attention cache);
* logits at every prefill position and decode step, and the self-attention
  presents vs transformers' self-attention cache at every step.

Also: the cpu build (SkipLayerNorm, BiasGelu fused) agrees with the portable
default build on onnxruntime's CPU EP, and a bare ``WhisperModel`` checkpoint
(names without ``model.``) loads to the same graph.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

from mobius.builder import build
from mobius.models import whisper_parity_cases as cases
from mobius.models.whisper_parity_cases import CASES, PROMPT, STEPS, inputs
from testing import seq2seq_reference
from testing.model_runs import ort_session
from testing.reference_cases import case_dir

F32_TOLERANCE = 1e-4


def _checkpoint(case: str, name: str = "ckpt") -> str:
    """A checkpoint of whisper_parity_cases.py: "ckpt", or "bare" (case "default")."""
    return os.path.join(case_dir(cases, case), name)


class Package:
    """The saved package's two onnxruntime sessions, driven as onnxruntime-genai does."""

    def __init__(self, path: str, config):
        self.config = config
        self.encoder = ort_session(os.path.join(path, "encoder.onnx"))
        self.decoder = ort_session(os.path.join(path, "decoder.onnx"))

    def encode(self, features):
        names = [o.name for o in self.encoder.get_outputs()]
        return dict(zip(names, self.encoder.run(None, {"audio_features": features})))

    def generate(self, features, prompt, steps: int, tokens=None):
        """Prefill + ``steps`` decode steps (greedy unless ``tokens`` are given):
        (per-step logits, per-step self presents [k0, v0, k1, ...], decode tokens, encoder outputs)."""
        encoded = self.encode(features)
        layers = self.config.num_hidden_layers
        cross = {f"past_{kind}_cross_{i}": encoded[f"present_{kind}_cross_{i}"]
                 for i in range(layers) for kind in ("key", "value")}
        empty = np.zeros((prompt.shape[0], self.config.num_attention_heads, 0, self.config.head_dim),
                         np.float32)
        past = {f"past_{kind}_self_{i}": empty for i in range(layers) for kind in ("key", "value")}
        names = [o.name for o in self.decoder.get_outputs()]
        logits, presents, chosen = [], [], []
        ids = prompt
        for step in range(steps + 1):
            out = dict(zip(names, self.decoder.run(None, {"input_ids": ids, **past, **cross})))
            logits.append(out["logits"])
            presents.append([out[f"present_{kind}_self_{i}"]
                             for i in range(layers) for kind in ("key", "value")])
            past = {f"past_{kind}_self_{i}": out[f"present_{kind}_self_{i}"]
                    for i in range(layers) for kind in ("key", "value")}
            if step == steps:
                break
            ids = (tokens[step] if tokens is not None
                   else out["logits"][:, -1].argmax(-1)[:, None].astype(np.int64))
            chosen.append(ids)
        return logits, presents, chosen, encoded


def _inputs(config, case: str):
    """The recorded features and prompt, which must be whisper_parity_cases.inputs for the
    built config; and transformers' recorded run."""
    with np.load(os.path.join(case_dir(cases, case), "reference.npz")) as data:
        reference = {k: data[k] for k in data.files}
    features, prompt = inputs(config.vocab_size, CASES[case])
    np.testing.assert_array_equal(reference["features"], features)
    np.testing.assert_array_equal(reference["prompt"], prompt)
    return features, prompt, reference


def _max_diff(a_list, b_list) -> float:
    return max(float(np.abs(a - b).max()) for a, b in zip(a_list, b_list, strict=True))


@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_transformers(tmp_path, case):
    package = build(_checkpoint(case))
    config = package.config
    onnx = Package(package.save(str(tmp_path / "pkg")), config)
    features, prompt, reference = _inputs(config, case)
    layers = config.num_hidden_layers
    states, cross, hf_logits, hf_presents, tokens = seq2seq_reference.unpack(
        reference, layers, STEPS)
    logits, presents, _, encoded = onnx.generate(features, prompt, STEPS, tokens)

    onnx_cross = [encoded[f"present_{kind}_cross_{i}"] for i in range(layers)
                  for kind in ("key", "value")]
    diffs = {
        "encoder_hidden_states": float(np.abs(encoded["encoder_hidden_states"] - states).max()),
        "cross_kv": _max_diff(onnx_cross, cross),
        "logits": _max_diff(logits, hf_logits),
        "self_kv": max(_max_diff(a, b) for a, b in zip(presents, hf_presents, strict=True)),
    }
    print(f"{case}: max |onnx - transformers| {diffs}")
    assert all(d <= F32_TOLERANCE for d in diffs.values()), diffs
    assert [p[0].shape[2] for p in presents] == [PROMPT + s for s in range(STEPS + 1)]
    assert logits[0].shape == (2, PROMPT, config.vocab_size)
    assert all(step.shape == (2, 1, config.vocab_size) for step in logits[1:])


def test_cpu_build_matches_default_build_on_ort_cpu(tmp_path):
    folder = _checkpoint("default")
    packages = {}
    for ep in ("default", "cpu"):
        package = build(folder, execution_provider=ep)
        packages[ep] = Package(package.save(str(tmp_path / ep)), package.config)
    features, prompt, _ = _inputs(packages["default"].config, "default")
    ref_logits, ref_presents, tokens, ref_encoded = packages["default"].generate(
        features, prompt, STEPS)
    logits, presents, _, encoded = packages["cpu"].generate(features, prompt, STEPS, tokens)
    diffs = {
        "encoder": max(float(np.abs(encoded[k] - ref_encoded[k]).max()) for k in ref_encoded),
        "logits": _max_diff(logits, ref_logits),
        "self_kv": max(_max_diff(a, b) for a, b in zip(presents, ref_presents, strict=True)),
    }
    print(f"cpu vs default: {diffs}")
    assert all(d <= F32_TOLERANCE for d in diffs.values()), diffs


def test_bare_whisper_model_checkpoint_loads_the_same(tmp_path):
    """``WhisperModel.save_pretrained`` writes encoder.* / decoder.* (no ``model.``,
    no proj_out: tied); the alias maps them onto the same graph."""
    folder, bare = _checkpoint("default"), _checkpoint("default", "bare")
    from safetensors import safe_open

    with safe_open(os.path.join(bare, "model.safetensors"), "np") as f:
        names = set(f.keys())
    assert "encoder.conv1.weight" in names and not any(n.startswith("model.") for n in names)

    runs = []
    for path in (folder, bare):
        package = build(path)
        runs.append(Package(package.save(str(tmp_path / f"pkg-{len(runs)}")), package.config))
    features, prompt, _ = _inputs(runs[0].config, "default")
    ref_logits, _, tokens, ref_encoded = runs[0].generate(features, prompt, 1)
    logits, _, _, encoded = runs[1].generate(features, prompt, 1, tokens)
    for key in ref_encoded:
        np.testing.assert_array_equal(encoded[key], ref_encoded[key])
    for a, b in zip(logits, ref_logits):
        np.testing.assert_array_equal(a, b)
