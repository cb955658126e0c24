"""OLMoE, GraniteMoE, PhiMoE and gpt-oss: L1 builds for every EP, L3 parity vs transformers per switch.

* L1: each family builds for every built-in EP and every dtype it accepts;
  the MoE blocks are one com.microsoft MoE each exactly where the EP has the
  kernel (``caps.fuses_moe(dtype)``), the decomposed routing everywhere else;
  PhiMoE's SparseMixer routing is built in the form the kernel fuses
  (mobius/components/chosen_routing.py).
* L3: f32 logits match transformers within 1e-4 over a left-padded batch
  prefill + 3 greedy decode steps with the KV cache, on the default and cpu
  EPs, for the presets and for each config switch the families read.
* The cuda graphs (fused MoE) run on onnxruntime's CPU EP MoE kernel.
* The checkpoints' biases (0 from transformers) are randomized.
* gpt-oss: its experts (stacked, biased, clamped SwiGLU) fuse into MoE too; its
  attention sinks matter: with large random sinks the logits still match, and a
  package of the same weights with the preset's small sinks does not.
"""

from __future__ import annotations

import os

import onnx
import pytest

from mobius.builder import build
from mobius.errors import ConfigError
from mobius.ep.registry import ep_registry
from mobius.models import gpt_oss, granitemoe, olmoe, phimoe
from mobius.optimize.histogram import op_histogram
from mobius.weights.dtypes import SHORT_NAMES, parse_dtype
from testing.hf_checkpoints import load_hf_model, make_hf_checkpoint, randomize_zero_tensors
from testing.model_runs import BuiltPackage, f32_parity

FAMILIES = {f.name: f for f in (olmoe.FAMILY, granitemoe.FAMILY, phimoe.FAMILY, gpt_oss.FAMILY)}
FUSED = ("olmoe", "granitemoe", "phimoe", "gpt_oss")  # fused where the EP has the MoE kernel

#: name: (family, config overrides). Each switch the families read differs
#: from its preset value in one variant (presets: olmoe norm_topk_prob False;
#: granitemoe with all four multipliers set; phimoe with attention and lm_head
#: biases, router_jitter_noise 0.01).
VARIANTS = {
    "olmoe": ("olmoe", {}),
    "olmoe_norm_topk_prob": ("olmoe", {"norm_topk_prob": True, "num_experts_per_tok": 3}),
    "olmoe_attention_bias": ("olmoe", {"attention_bias": True}),
    "granitemoe": ("granitemoe", {}),
    "granitemoe_unit_multipliers_bias": (
        "granitemoe", {"embedding_multiplier": 1.0, "residual_multiplier": 1.0,
                       "attention_multiplier": 1.0, "logits_scaling": 1.0,
                       "attention_bias": True, "num_experts_per_tok": 3}),
    "phimoe": ("phimoe", {}),
    # router_jitter_noise is SparseMixer's threshold at inference (input_jitter_noise
    # is training-only); no biases; a sliding window shorter than the sequence.
    "phimoe_jitter_window_no_bias": (
        "phimoe", {"router_jitter_noise": 0.4, "input_jitter_noise": 0.5, "attention_bias": False,
                   "lm_head_bias": False, "sliding_window": 4}),
    "phimoe_longrope": (
        "phimoe", {"max_position_embeddings": 128, "rope_scaling": {
            "type": "longrope", "original_max_position_embeddings": 32, "short_mscale": 1.19,
            "long_mscale": 1.19, "short_factor": [1.0 + 0.05 * i for i in range(8)],
            "long_factor": [1.5 + 0.25 * i for i in range(8)]}}),
    "gpt_oss": ("gpt_oss", {}),  # switch cases: dense_families_test
}

MOE = "com.microsoft::MoE"


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    made = {}

    def get(variant: str) -> str:
        if variant not in made:
            family, overrides = VARIANTS[variant]
            folder = tmp_path_factory.mktemp(f"ckpt-{variant}")
            made[variant] = randomize_zero_tensors(make_hf_checkpoint(
                str(folder), FAMILIES[family].tiny_preset, **overrides))
        return made[variant]

    return get


def _experts(config) -> int:
    return config.raw.get("num_local_experts") or config.raw["num_experts"]


L1_CASES = [
    (family, caps.name, SHORT_NAMES[dtype])
    for family in FAMILIES
    for caps in ep_registry
    if caps.tasks is None or "text-generation" in caps.tasks
    for dtype in sorted(caps.dtypes, key=lambda d: SHORT_NAMES[d])
]


@pytest.mark.parametrize("family,ep,dtype", L1_CASES, ids=["-".join(c) for c in L1_CASES])
def test_builds_for_every_ep_with_fused_moe_where_the_ep_has_it(checkpoints, tmp_path, family,
                                                                ep, dtype):
    package = build(checkpoints(family), execution_provider=ep, dtype=dtype)
    histogram = op_histogram(package.models["model"])
    config = package.config
    caps = ep_registry.get(ep)
    layers = config.num_hidden_layers
    if family in FUSED and caps.fuses_moe(parse_dtype(dtype)):
        assert histogram[MOE] == layers, histogram
        assert not histogram.get("NonZero") and not histogram.get("ScatterND"), histogram
    else:
        assert not histogram.get(MOE), histogram
        assert histogram["NonZero"] == histogram["ScatterND"] == layers * _experts(config)
    path = package.save(str(tmp_path / "pkg"), overwrite=True)
    onnx.checker.check_model(os.path.join(path, "model.onnx"), full_check=True)


def _parity(folder, tmp_path, ep, *, pad, steps):
    package = build(folder, execution_provider=ep, dtype="f32", prefill_logits="all")
    path = package.save(str(tmp_path / ep), overwrite=True)
    return f32_parity(BuiltPackage(path, package.config, "f32"), load_hf_model(folder),
                      pad=pad, steps=steps), package


PARITY_CASES = [(v, ep) for v in sorted(VARIANTS) for ep in ("default", "cpu")]


@pytest.mark.parametrize("variant,ep", PARITY_CASES, ids=["-".join(c) for c in PARITY_CASES])
def test_f32_parity_with_transformers(checkpoints, tmp_path, variant, ep):
    """Left-padded batch prefill + 3 decode steps, <= 1e-4 (cpu: GQA, padded prefill
    only when its kernel applies RoPE, as in moe_families_test)."""
    folder = checkpoints(variant)
    run, package = _parity(folder, tmp_path / "a", ep, pad=0, steps=3)
    assert run.max_abs_diff <= 1e-4, f"{variant}/{ep} unpadded: {run.max_abs_diff:.3g}"
    fused_rotary = any(n.op_type == "GroupQueryAttention" and n.attributes.get("do_rotary")
                       is not None and n.attributes["do_rotary"].value == 1
                       for n in package.models["model"].graph)
    padded, _ = _parity(folder, tmp_path / "b", ep, pad=3, steps=0 if fused_rotary else 3)
    assert padded.max_abs_diff <= 1e-4, f"{variant}/{ep} left-padded: {padded.max_abs_diff:.3g}"


@pytest.mark.parametrize("family", FUSED + ("phimoe_jitter_window_no_bias",))
def test_cuda_graph_with_fused_moe_matches_transformers_on_the_cpu_ep(checkpoints, tmp_path,
                                                                      family):
    run, package = _parity(checkpoints(family), tmp_path, "cuda", pad=0, steps=3)
    assert op_histogram(package.models["model"])[MOE] == package.config.num_hidden_layers
    assert run.max_abs_diff <= 1e-4, f"{family}/cuda f32: {run.max_abs_diff:.3g}"


def test_olmoe_clip_qkv_is_rejected_before_building(tmp_path):
    folder = make_hf_checkpoint(str(tmp_path / "ckpt"), "tiny-olmoe", clip_qkv=8.0)
    with pytest.raises(ConfigError, match="clip_qkv"):
        build(folder, execution_provider="default")


@pytest.mark.parametrize("overrides,match", [
    ({"num_experts_per_tok": 3}, "exactly 2 experts"),
    ({"rope_scaling": {"type": "longrope", "original_max_position_embeddings": 64,
                       "short_mscale": 1.1, "long_mscale": 1.3, "short_factor": [1.0] * 8,
                       "long_factor": [2.0] * 8}}, "short_mscale"),
])
def test_phimoe_unsupported_switches_are_rejected_before_building(tmp_path, overrides, match):
    folder = make_hf_checkpoint(str(tmp_path / "ckpt"), "tiny-phimoe", **overrides)
    out = tmp_path / "out"
    with pytest.raises(ConfigError, match=match):
        build(folder, execution_provider="default").save(str(out))
    assert not out.exists()


def _with_sinks(folder: str, out: str, scale: float) -> str:
    """A copy of ``folder`` whose attention sinks are N(0, scale) (the preset's are N(0, 0.02))."""
    import shutil

    import numpy as np
    from safetensors.numpy import load_file, save_file

    shutil.copytree(folder, out)
    rng = np.random.default_rng(5)
    path = os.path.join(out, "model.safetensors")
    tensors = load_file(path)
    for name in [n for n in tensors if n.endswith(".sinks")]:
        tensors[name] = (scale * rng.standard_normal(tensors[name].shape)).astype(np.float32)
    save_file(tensors, path, metadata={"format": "pt"})
    return out


@pytest.mark.parametrize("ep", ["default", "cpu"])
def test_gpt_oss_large_sinks_match_and_matter(checkpoints, tmp_path, ep):
    folder = _with_sinks(checkpoints("gpt_oss"), str(tmp_path / "sinks"), 2.0)
    hf_model = load_hf_model(folder)
    package = build(folder, execution_provider=ep, dtype="f32", prefill_logits="all")
    path = package.save(str(tmp_path / "pkg"), overwrite=True)
    sinks_op = "com.microsoft::GroupQueryAttention" if ep == "cpu" else "Attention"
    assert op_histogram(package.models["model"])[sinks_op] == package.config.num_hidden_layers
    run = f32_parity(BuiltPackage(path, package.config, "f32"), hf_model, pad=0, steps=3)
    assert run.max_abs_diff <= 1e-4, f"gpt_oss large sinks/{ep}: {run.max_abs_diff:.3g}"
    small = build(checkpoints("gpt_oss"), execution_provider=ep, dtype="f32", prefill_logits="all")
    small_path = small.save(str(tmp_path / "small"), overwrite=True)
    other = f32_parity(BuiltPackage(small_path, small.config, "f32"), hf_model, pad=0, steps=3)
    assert other.max_abs_diff > 1e-3, f"the sinks change nothing ({other.max_abs_diff:.3g})"
