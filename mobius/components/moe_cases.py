"""transformers' side of moe_test (//rules:references.bzl): Mixtral / Qwen3-MoE / Qwen2-MoE
sparse blocks with every parameter random, their state in the per-expert checkpoint layout
(state.npz) and their output on a random input (arrays.npz: x, y); and torch's dense top-k
routing weights (case "routing").

transformers 5 keeps the experts fused ([E, 2I, H] gate_up_proj, [E, H, I] down_proj); the
checkpoints (and mobius) use one tensor per expert, so the state dict is split the way
save_pretrained writes it.
"""

from __future__ import annotations

import numpy as np

HIDDEN, INTER, SHARED = 24, 40, 28

#: the checkpoints' expert tensor names (gate, up, down) of each block kind
EXPERT_NAMES = {"mixtral": ("w1", "w3", "w2"), "qwen3_moe": ("gate_proj", "up_proj", "down_proj"),
                "qwen2_moe": ("gate_proj", "up_proj", "down_proj")}

#: name: (kind, experts, top_k, normalize); compared on x of seed 1, shape [3, 5, HIDDEN]
BLOCKS = {
    "mixtral_e4_k2": ("mixtral", 4, 2, True),
    "mixtral_e8_k2": ("mixtral", 8, 2, True),
    "qwen3_moe_e6_k2": ("qwen3_moe", 6, 2, False),
    "qwen3_moe_e6_k3_norm": ("qwen3_moe", 6, 3, True),
    "qwen3_moe_e5_k1": ("qwen3_moe", 5, 1, False),
    "qwen3_moe_e4_k4": ("qwen3_moe", 4, 4, False),
    "qwen2_moe_shared_e4_k2": ("qwen2_moe", 4, 2, False),
}

#: case: (block, x seed, x shape)
RUNS = {
    **{name: (block, 1, (3, 5, HIDDEN)) for name, block in BLOCKS.items()},
    "single_token": (("mixtral", 8, 2, True), 2, (1, 1, HIDDEN)),  # decode: most experts idle
    "half_precision": (("qwen3_moe", 6, 2, True), 3, (2, 4, HIDDEN)),
}
ROUTING_TOP_K = 2
CASES = [*sorted(RUNS), "routing"]


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
    import torch
    import transformers
    from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock
    from transformers.models.qwen2_moe.modeling_qwen2_moe import Qwen2MoeSparseMoeBlock
    from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeSparseMoeBlock

    common = dict(hidden_size=HIDDEN, num_attention_heads=4, num_experts_per_tok=top_k)
    if kind == "mixtral":
        config = transformers.MixtralConfig(intermediate_size=INTER, num_local_experts=num_experts,
                                            **common)
        block_cls = MixtralSparseMoeBlock
    elif kind == "qwen3_moe":
        config = transformers.Qwen3MoeConfig(moe_intermediate_size=INTER, num_experts=num_experts,
                                             norm_topk_prob=normalize, **common)
        block_cls = Qwen3MoeSparseMoeBlock
    else:
        config = transformers.Qwen2MoeConfig(moe_intermediate_size=INTER, num_experts=num_experts,
                                             norm_topk_prob=normalize,
                                             shared_expert_intermediate_size=SHARED, **common)
        block_cls = Qwen2MoeSparseMoeBlock
    torch.manual_seed(seed)
    block = block_cls(config).eval()
    with torch.no_grad():
        for p in block.parameters():
            p.normal_(0.0, 0.3)
    return block


def _routing() -> dict[str, np.ndarray]:
    """Random router logits and torch's dense top-k softmax weights, unnormalized and
    renormalized over the top k."""
    import torch

    logits = np.random.default_rng(4).standard_normal((3, 7, 6)).astype(np.float32)
    probs = torch.softmax(torch.from_numpy(logits), -1)
    values, indices = torch.topk(probs, ROUTING_TOP_K, dim=-1)
    arrays = {"logits": logits}
    for normalize in (False, True):
        if normalize:
            values = values / values.sum(-1, keepdim=True)
        arrays[f"normalize_{normalize}"] = torch.zeros_like(probs).scatter(
            -1, indices, values).numpy()
    return arrays


def write_case(case: str, folder: str) -> None:
    """state.npz (checkpoint names) and arrays.npz (x, y); "routing": arrays.npz only."""
    import torch

    from testing import recorded_arrays

    if case == "routing":
        recorded_arrays.save(folder, _routing())
        return
    (kind, experts, top_k, normalize), seed, shape = RUNS[case]
    block = _hf_block(kind, experts, top_k, normalize)
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    with torch.no_grad():
        y = block(torch.from_numpy(x)).numpy()
    recorded_arrays.save(folder, per_expert_state(block, EXPERT_NAMES[kind]), "state")
    recorded_arrays.save(folder, {"x": x, "y": y})
