"""torch's side of conv_test (//rules:references.bzl): torch.nn.Conv1d's state (state.npz)
and output on a random input (arrays.npz: x, y), plain and under weight_norm."""

from __future__ import annotations

import numpy as np

IN, OUT, LENGTH = 6, 10, 14
#: (kernel, stride, padding, bias): Whisper's conv1, conv2 (halves the length), no padding
#: and no bias, an even kernel with a stride that does not divide the length
CONVS = [(3, 1, 1, True), (3, 2, 1, True), (5, 1, 0, False), (4, 3, 2, True)]
#: (kernel, parametrized): wav2vec2's grouped positional conv under weight_norm(dim=2),
#: torch.nn.utils.parametrizations.weight_norm or the older torch.nn.utils.weight_norm
WEIGHT_NORMS = [(k, p) for k in (4, 5) for p in (True, False)]


def conv_case(kernel: int, stride: int, padding: int, bias: bool) -> str:
    return f"conv_k{kernel}_s{stride}_p{padding}_{'bias' if bias else 'no_bias'}"


def weight_norm_case(kernel: int, parametrized: bool) -> str:
    return f"weight_norm_k{kernel}_{'parametrizations' if parametrized else 'weight_g_v'}"


CASES = sorted([conv_case(*c) for c in CONVS] + [weight_norm_case(*w) for w in WEIGHT_NORMS])


def _module(case: str):
    import torch

    torch.manual_seed(0)
    for kernel, stride, padding, bias in CONVS:
        if case == conv_case(kernel, stride, padding, bias):
            return torch.nn.Conv1d(IN, OUT, kernel, stride=stride, padding=padding, bias=bias)
    kernel, parametrized = next(w for w in WEIGHT_NORMS if case == weight_norm_case(*w))
    norm = torch.nn.utils.parametrizations.weight_norm if parametrized else (
        torch.nn.utils.weight_norm)
    return norm(torch.nn.Conv1d(OUT, OUT, kernel, padding=kernel // 2, groups=2), dim=2)


def write_case(case: str, folder: str) -> None:
    """state.npz (the module's state_dict) and arrays.npz (x, torch's y)."""
    import torch

    from testing import recorded_arrays

    ref = _module(case).eval()
    channels = IN if case.startswith("conv_") else OUT
    x = np.random.default_rng(0).standard_normal((2, channels, LENGTH)).astype(np.float32)
    with torch.no_grad():
        y = ref(torch.from_numpy(x)).numpy()
    state = {k: v.detach().numpy().copy() for k, v in ref.state_dict().items()}
    recorded_arrays.save(folder, state, "state")
    recorded_arrays.save(folder, {"x": x, "y": y})
