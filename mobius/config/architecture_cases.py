"""transformers' side of architecture_test (//rules:references.bzl): the config dict
transformers 5 itself makes of a 4.x-style Llama config.json (converted.json)."""

from __future__ import annotations

import json
import os

# A transformers 4.x-style Llama config.json (top-level rope_theta, rope_scaling, torch_dtype).
V4_LLAMA = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "vocab_size": 1031,
    "hidden_size": 64,
    "intermediate_size": 172,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 256,
    "rms_norm_eps": 1e-5,
    "rope_theta": 500000.0,
    "rope_scaling": {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 64,
    },
    "torch_dtype": "bfloat16",
    "bos_token_id": 1,
    "eos_token_id": [2, 5],
}
CASES = ["v5_llama"]


def write_case(case: str, folder: str) -> None:
    """converted.json: AutoConfig.for_model(**V4_LLAMA).to_dict()."""
    import transformers

    with open(os.path.join(folder, "converted.json"), "w") as f:
        json.dump(transformers.AutoConfig.for_model(**V4_LLAMA).to_dict(), f, indent=1)
