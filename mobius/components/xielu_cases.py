"""transformers' side of xielu_test (//rules:references.bzl): XIELUActivation's output on
random inputs for each case's (alpha_p, alpha_n, beta, eps) init, recorded with its state."""

from __future__ import annotations

import numpy as np

#: case: XIELUActivation's init (alpha_p_init, alpha_n_init, beta, eps): transformers'
#: defaults, and other constants, so that a hard-coded beta or eps fails
INITS = {"default": (0.8, 0.8, 0.5, -1e-6), "other": (1.3, 0.9, 0.25, -0.05)}
CASES = sorted(INITS)


def write_case(case: str, folder: str) -> None:
    """state.npz (alpha_p, alpha_n, beta, eps) and arrays.npz (x, y): x spans both branches
    and the [eps, 0] band, and includes 0 and eps themselves."""
    import torch
    from transformers.activations import XIELUActivation

    from testing import recorded_arrays

    alpha_p, alpha_n, beta, eps = INITS[case]
    module = XIELUActivation(alpha_p, alpha_n, beta, eps, dtype=torch.float32)
    rng = np.random.default_rng(len(case))
    x = np.concatenate([rng.standard_normal(200) * 3, rng.uniform(-2e-3, 2e-3, 40),
                        [0.0, eps, -4.0, 4.0]]).astype(np.float32).reshape(2, 2, 61)
    with torch.no_grad():
        y = module(torch.from_numpy(x)).numpy()
    state = {k: v.detach().numpy().copy() for k, v in module.state_dict().items()}
    recorded_arrays.save(folder, state, "state")
    recorded_arrays.save(folder, {"x": x, "y": y})
