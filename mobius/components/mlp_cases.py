"""transformers' side of mlp_test (//rules:references.bzl): LlamaMLP per activation, ± bias
(state.npz: its state_dict; arrays.npz: x and its output y), the f16 run ("f16": x stored
as float32 values) and the activation names transformers' ACT2FN knows ("activations")."""

from __future__ import annotations

import numpy as np

HIDDEN, INTER = 24, 56
ACTIVATIONS = ["silu", "gelu", "gelu_pytorch_tanh", "gelu_new", "relu"]


def case_name(activation: str, bias: bool) -> str:
    return f"{activation}_{'bias' if bias else 'no_bias'}"


#: case: (activation, bias), compared on x of seed 0; "f16": silu without bias, x of seed 1
MLPS = {**{case_name(a, b): (a, b) for a in ACTIVATIONS for b in (False, True)},
        "f16": ("silu", False)}
CASES = [*sorted(MLPS), "activations"]


def _hf_mlp(activation, bias, seed=0):
    import torch
    import transformers
    from transformers.models.llama.modeling_llama import LlamaMLP

    config = transformers.LlamaConfig(hidden_size=HIDDEN, intermediate_size=INTER,
                                      num_attention_heads=4, hidden_act=activation,
                                      mlp_bias=bias)
    torch.manual_seed(seed)
    module = LlamaMLP(config).eval()
    if bias:
        with torch.no_grad():
            for name, p in module.named_parameters():
                if name.endswith("bias"):
                    p.normal_()
    return module


def write_case(case: str, folder: str) -> None:
    """state.npz and arrays.npz (x, y); "activations": arrays.npz with ACT2FN's names."""
    import torch
    from transformers.activations import ACT2FN

    from testing import recorded_arrays

    if case == "activations":
        recorded_arrays.save(folder, {"names": np.array(sorted(ACT2FN))})
        return
    module = _hf_mlp(*MLPS[case])
    f16 = case == "f16"
    x = np.random.default_rng(1 if f16 else 0).standard_normal((2, 4, HIDDEN)).astype(
        np.float16 if f16 else np.float32)
    with torch.no_grad():
        y = module(torch.from_numpy(x.astype(np.float32))).numpy()
    state = {k: v.detach().numpy().copy() for k, v in module.state_dict().items()}
    recorded_arrays.save(folder, state, "state")
    recorded_arrays.save(folder, {"x": x.astype(np.float32), "y": y})
