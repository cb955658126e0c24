"""SparseMoE vs transformers' Mixtral / Qwen3-MoE / Qwen2-MoE (shared expert) sparse blocks.

transformers 5 keeps the experts fused ([E, 2I, H] gate_up_proj, [E, H, I]
down_proj); the checkpoints (and mobius) use one tensor per expert, so the
state dict is split the way save_pretrained writes it.
"""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest

import torch
import transformers

from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock
from transformers.models.qwen2_moe.modeling_qwen2_moe import Qwen2MoeSparseMoeBlock
from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeSparseMoeBlock

from mobius.components.moe import (
    MIXTRAL_EXPERT_NAMES,
    QWEN_EXPERT_NAMES,
    SparseMoE,
    routing_weights,
)
from mobius.context import build_context
from testing.onnx_graphs import attach_arrays, component_model, run_model, run_reference

HIDDEN, INTER, SHARED = 24, 40, 28


def per_expert_state(module, names) -> dict[str, np.ndarray]:
    """transformers' fused expert tensors -> the per-expert checkpoint layout."""
    gate_name, up_name, down_name = names
    state = {}
    for key, value in module.state_dict().items():
        value = value.detach().numpy().copy()
        if key == "experts.gate_up_proj":
            inter = value.shape[1] // 2
            for e in range(value.shape[0]):
                state[f"experts.{e}.{gate_name}.weight"] = value[e, :inter]
                state[f"experts.{e}.{up_name}.weight"] = value[e, inter:]
        elif key == "experts.down_proj":
            for e in range(value.shape[0]):
                state[f"experts.{e}.{down_name}.weight"] = value[e]
        else:
            state[key] = value
    return state


def _hf_block(kind: str, num_experts: int, top_k: int, normalize: bool, seed: int = 0):
    common = dict(hidden_size=HIDDEN, num_attention_heads=4, num_experts_per_tok=top_k)
    if kind == "mixtral":
        config = transformers.MixtralConfig(intermediate_size=INTER, num_local_experts=num_experts,
                                            **common)
        block_cls, names = MixtralSparseMoeBlock, MIXTRAL_EXPERT_NAMES
    elif kind == "qwen3_moe":
        config = transformers.Qwen3MoeConfig(moe_intermediate_size=INTER, num_experts=num_experts,
                                             norm_topk_prob=normalize, **common)
        block_cls, names = Qwen3MoeSparseMoeBlock, QWEN_EXPERT_NAMES
    else:
        config = transformers.Qwen2MoeConfig(moe_intermediate_size=INTER, num_experts=num_experts,
                                             norm_topk_prob=normalize,
                                             shared_expert_intermediate_size=SHARED, **common)
        block_cls, names = Qwen2MoeSparseMoeBlock, QWEN_EXPERT_NAMES
    torch.manual_seed(seed)
    block = block_cls(config).eval()
    with torch.no_grad():
        for p in block.parameters():
            p.normal_(0.0, 0.3)
    return block, per_expert_state(block, names), names


def _mobius(tmp_path, state, names, num_experts, top_k, normalize, shared, dtype=ir.DataType.FLOAT):
    with build_context(None, dtype):
        moe = SparseMoE(HIDDEN, INTER, num_experts, top_k, normalize_top_k=normalize,
                        expert_names=names, shared_expert_size=SHARED if shared else None)
    attach_arrays(moe, state, tmp_path)
    return component_model([("x", dtype, ["batch", "seq", HIDDEN])],
                           lambda op, x_: moe(op, x_), [("y", ["batch", "seq", HIDDEN])])


CASES = {
    # name: (kind, experts, top_k, normalize)
    "mixtral_e4_k2": ("mixtral", 4, 2, True),
    "mixtral_e8_k2": ("mixtral", 8, 2, True),
    "qwen3_moe_e6_k2": ("qwen3_moe", 6, 2, False),
    "qwen3_moe_e6_k3_norm": ("qwen3_moe", 6, 3, True),
    "qwen3_moe_e5_k1": ("qwen3_moe", 5, 1, False),
    "qwen3_moe_e4_k4": ("qwen3_moe", 4, 4, False),
    "qwen2_moe_shared_e4_k2": ("qwen2_moe", 4, 2, False),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_transformers(tmp_path, case):
    kind, experts, top_k, normalize = CASES[case]
    block, state, names = _hf_block(kind, experts, top_k, normalize)
    x = np.random.default_rng(1).standard_normal((3, 5, HIDDEN)).astype(np.float32)
    with torch.no_grad():
        expected = block(torch.from_numpy(x)).numpy()
    model = _mobius(tmp_path, state, names, experts, top_k, normalize, kind == "qwen2_moe")
    (got,) = run_model(model, {"x": x})
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_single_token_and_empty_experts(tmp_path):
    """Decode shape [batch, 1, hidden]: most experts get no token and must still run (0 rows)."""
    block, state, names = _hf_block("mixtral", 8, 2, True)
    x = np.random.default_rng(2).standard_normal((1, 1, HIDDEN)).astype(np.float32)
    with torch.no_grad():
        expected = block(torch.from_numpy(x)).numpy()
    (got,) = run_model(_mobius(tmp_path, state, names, 8, 2, True, False), {"x": x})
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype, np_dtype, tol", [
    (ir.DataType.FLOAT16, np.float16, 2e-2),
    (ir.DataType.BFLOAT16, None, 6e-2),
], ids=["f16", "bf16"])
def test_half_precision(tmp_path, dtype, np_dtype, tol):
    import ml_dtypes

    np_dtype = np_dtype or ml_dtypes.bfloat16
    block, state, names = _hf_block("qwen3_moe", 6, 2, True)
    x = np.random.default_rng(3).standard_normal((2, 4, HIDDEN)).astype(np.float32)
    with torch.no_grad():
        expected = block(torch.from_numpy(x)).numpy()
    model = _mobius(tmp_path, state, names, 6, 2, True, False, dtype)
    runner = run_reference if dtype == ir.DataType.BFLOAT16 else run_model
    (got,) = runner(model, {"x": x.astype(np_dtype)})
    assert got.dtype == np.dtype(np_dtype)
    np.testing.assert_allclose(got.astype(np.float32), expected, rtol=tol, atol=tol)


@pytest.mark.parametrize("normalize", [False, True])
def test_routing_weights_are_dense_top_k(normalize):
    rng = np.random.default_rng(4)
    logits = rng.standard_normal((3, 7, 6)).astype(np.float32)
    model = component_model(
        [("logits", ir.DataType.FLOAT, [3, 7, 6])],
        lambda op, lg: routing_weights(op, lg, 2, normalize, ir.DataType.FLOAT),
        ["routing"])
    (got,) = run_model(model, {"logits": logits})
    probs = torch.softmax(torch.from_numpy(logits), -1)
    values, indices = torch.topk(probs, 2, dim=-1)
    if normalize:
        values = values / values.sum(-1, keepdim=True)
    expected = torch.zeros_like(probs).scatter(-1, indices, values).numpy()
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, expected, rtol=1e-6, atol=1e-7)
    assert ((got > 0).sum(-1) == 2).all()


def test_parameter_names_follow_the_checkpoints():
    with build_context(None, ir.DataType.FLOAT):
        mixtral = SparseMoE(HIDDEN, INTER, 2, 1, expert_names=MIXTRAL_EXPERT_NAMES)
        qwen2 = SparseMoE(HIDDEN, INTER, 2, 1, shared_expert_size=SHARED)
    assert sorted(n for n, _ in mixtral.named_parameters()) == [
        "experts.0.w1.weight", "experts.0.w2.weight", "experts.0.w3.weight",
        "experts.1.w1.weight", "experts.1.w2.weight", "experts.1.w3.weight", "gate.weight"]
    assert {n for n, _ in qwen2.named_parameters()} >= {
        "experts.1.gate_proj.weight", "experts.1.up_proj.weight", "experts.1.down_proj.weight",
        "shared_expert.gate_proj.weight", "shared_expert_gate.weight", "gate.weight"}


def test_bad_top_k():
    with build_context(None, ir.DataType.FLOAT), pytest.raises(ValueError, match="top_k"):
        SparseMoE(HIDDEN, INTER, 4, 5)
