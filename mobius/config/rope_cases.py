"""transformers' side of rope_test (the reference_cases rule runs it at build time,
//rules:references.bzl).

"transformers": configs.json (each variant's ``LlamaConfig.to_dict()``, the dict mobius
reads) and rope.npz: ``ROPE_INIT_FUNCTIONS`` inv_freq and attention scaling per variant,
LongRoPE's long frequencies, ``LlamaRotaryEmbedding`` cos / sin tables. Each E2E case: a
tiny-llama checkpoint and transformers' padded run on it (testing/checkpoint_runs.py).
"""

from __future__ import annotations

import json
import os

import numpy as np

DIMS = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, intermediate_size=172,
            num_hidden_layers=2, vocab_size=1031, max_position_embeddings=256)

_SHORT = [float(x) for x in np.linspace(1.0, 2.0, 8)]
_LONG = [float(x) for x in np.linspace(1.0, 8.0, 8)]

VARIANTS = {
    "linear": {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0},
    "linear_partial": {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0,
                       "partial_rotary_factor": 0.5},
    "dynamic": {"rope_type": "dynamic", "factor": 2.0, "rope_theta": 10000.0},
    "llama3": {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
               "high_freq_factor": 4.0, "original_max_position_embeddings": 64,
               "rope_theta": 500000.0},
    "yarn": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
             "rope_theta": 10000.0},
    "yarn_betas": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
                   "rope_theta": 10000.0, "beta_fast": 16.0, "beta_slow": 2.0},
    "yarn_mscale": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
                    "rope_theta": 10000.0, "mscale": 1.0, "mscale_all_dim": 0.5},
    "yarn_mscale_equal": {"rope_type": "yarn", "factor": 40.0,
                          "original_max_position_embeddings": 64, "rope_theta": 10000.0,
                          "mscale": 0.707, "mscale_all_dim": 0.707},
    "yarn_attention_factor": {"rope_type": "yarn", "factor": 4.0, "attention_factor": 0.8,
                              "original_max_position_embeddings": 64, "rope_theta": 10000.0},
    "yarn_no_truncate": {"rope_type": "yarn", "factor": 4.0, "truncate": False,
                         "original_max_position_embeddings": 64, "rope_theta": 10000.0},
    "yarn_partial": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64,
                     "rope_theta": 10000.0, "partial_rotary_factor": 0.5},
    "longrope": {"rope_type": "longrope", "factor": 2.0, "original_max_position_embeddings": 64,
                 "rope_theta": 10000.0, "short_factor": _SHORT, "long_factor": _LONG},
    "longrope_no_factor": {"rope_type": "longrope", "original_max_position_embeddings": 64,
                           "rope_theta": 10000.0, "short_factor": _SHORT, "long_factor": _LONG},
}
#: plain RoPE: the base test_default_rope_matches_transformers checks, and the one the
#: variants must differ from
DEFAULTS = {"default": {"rope_type": "default", "rope_theta": 12345.0},
            "default_10000": {"rope_type": "default", "rope_theta": 10000.0}}
#: the variants whose cos / sin tables are compared (positions 0..COS_SIN_POSITIONS - 1)
COS_SIN_VARIANTS = ["linear", "llama3", "yarn", "yarn_mscale", "longrope"]
COS_SIN_POSITIONS = 64

# max_position_embeddings 16 so that a 20-token prompt crosses it: dynamic NTK then
# recomputes its frequencies in the graph; LongRoPE switches to its long factors past
# original_max_position_embeddings.
E2E = {
    "dynamic": (dict(max_position_embeddings=16,
                     rope_parameters={"rope_type": "dynamic", "factor": 2.0,
                                      "rope_theta": 10000.0}), 20),
    "linear": (dict(rope_parameters={"rope_type": "linear", "factor": 2.0,
                                     "rope_theta": 10000.0}), 10),
    "llama3": (dict(rope_parameters=VARIANTS["llama3"]), 10),
    "yarn": (dict(rope_parameters=VARIANTS["yarn_mscale"]), 10),
    "yarn_no_truncate": (dict(rope_parameters=VARIANTS["yarn_no_truncate"]), 10),
    "longrope": (dict(max_position_embeddings=64,
                      rope_parameters={"rope_type": "longrope", "factor": 4.0,
                                       "original_max_position_embeddings": 16,
                                       "rope_theta": 10000.0,
                                       "short_factor": _SHORT, "long_factor": _LONG}), 20),
}

CASES = ["transformers", *(f"e2e_{name}" for name in sorted(E2E))]


def write_case(case: str, folder: str) -> None:
    """"transformers": configs.json and rope.npz; e2e_<name>: ckpt/ and padded.npz."""
    if case == "transformers":
        _write_transformers(folder)
        return
    from testing import checkpoint_runs
    from testing.hf_checkpoints import make_hf_checkpoint

    overrides, prompt_len = E2E[case[len("e2e_"):]]
    checkpoint_runs.write(folder, lambda ckpt: make_hf_checkpoint(ckpt, "tiny-llama", **overrides),
                          {"padded": 3}, prompt_len=prompt_len, steps=3)


def _write_transformers(folder: str) -> None:
    """configs.json: name -> config dict; rope.npz: inv_freq_<name>, scaling_<name> (the
    variants and DEFAULTS), long_inv_freq_longrope (past original_max_position_embeddings),
    cos_<name> / sin_<name> [positions, head_dim] for COS_SIN_VARIANTS."""
    import torch
    import transformers
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    configs = {name: transformers.LlamaConfig(**DIMS, rope_parameters=dict(params))
               for name, params in {**VARIANTS, **DEFAULTS}.items()}
    arrays = {}
    for name, config in configs.items():
        arrays[f"inv_freq_{name}"], arrays[f"scaling_{name}"] = _inv_freq(config)
    original = VARIANTS["longrope"]["original_max_position_embeddings"]
    arrays["long_inv_freq_longrope"], _ = _inv_freq(configs["longrope"], seq_len=original + 1)
    positions = torch.arange(0, COS_SIN_POSITIONS)[None]
    for name in COS_SIN_VARIANTS:
        with torch.no_grad():
            cos, sin = LlamaRotaryEmbedding(configs[name])(torch.zeros(1, dtype=torch.float32),
                                                           positions)
        arrays[f"cos_{name}"], arrays[f"sin_{name}"] = cos[0].numpy(), sin[0].numpy()
    np.savez(os.path.join(folder, "rope.npz"), **arrays)
    with open(os.path.join(folder, "configs.json"), "w") as f:
        json.dump({name: config.to_dict() for name, config in configs.items()}, f, indent=1)


def _inv_freq(config, seq_len=None) -> tuple[np.ndarray, np.ndarray]:
    """transformers' inv_freq (float64) and attention scaling for ``config``."""
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    rope_type = config.rope_parameters["rope_type"]
    if rope_type == "default":
        inv_freq, scaling = LlamaRotaryEmbedding.compute_default_rope_parameters(config)
    else:
        inv_freq, scaling = ROPE_INIT_FUNCTIONS[rope_type](config, None, seq_len=seq_len)
    return inv_freq.double().numpy(), np.float64(float(scaling))
