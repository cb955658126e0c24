"""config.json contents of the built-in tiny models.

Dimensions are tiny but distinct from each other (and the vocabulary size
from everything else) so that a transposed or swapped weight cannot pass a
test by accident. head_dim is 16 so fused attention kernels with rotary
(which need head_size % 16 == 0 on CPU) apply.
"""

VOCAB_SIZE = 1031

_COMMON = {
    "vocab_size": VOCAB_SIZE,
    "hidden_size": 64,
    "intermediate_size": 172,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 256,
    "rms_norm_eps": 1e-6,
    "hidden_act": "silu",
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 0,
    "tie_word_embeddings": False,
    "rope_theta": 10000.0,
}

TINY_PRESETS: dict[str, dict] = {
    "tiny-llama": {**_COMMON, "model_type": "llama", "architectures": ["LlamaForCausalLM"]},
    "tiny-mistral": {
        **_COMMON,
        "model_type": "mistral",
        "architectures": ["MistralForCausalLM"],
        "sliding_window": 8,
    },
    "tiny-qwen2": {
        **_COMMON,
        "model_type": "qwen2",
        "architectures": ["Qwen2ForCausalLM"],
        "tie_word_embeddings": True,
        "use_sliding_window": False,
    },
    "tiny-qwen3": {
        **_COMMON,
        "model_type": "qwen3",
        "architectures": ["Qwen3ForCausalLM"],
        "head_dim": 32,
        "tie_word_embeddings": True,
    },
}
