"""Benchmark checkpoints: Llama-shaped random float32 weights at real tensor sizes.

Each preset is a transformers ``config.json`` plus a shard count. ``200m`` is
the original small benchmark; ``llama3.2-1b`` has Llama-3.2-1B's shapes (tied
embeddings, vocab 128256); ``llama3.1-8b-4l`` has Llama-3.1-8B's tensor
shapes cut to 4 layers, so every tensor is real-sized while the total fits a
small machine. Written with numpy only, one tensor at a time.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time

CHECKPOINT_VERSION = 2  # bump when a shape, dtype or layout below changes

_COMMON = {
    "architectures": ["LlamaForCausalLM"], "model_type": "llama", "rms_norm_eps": 1e-5,
    "hidden_act": "silu", "attention_bias": False, "mlp_bias": False,
    "initializer_range": 0.02, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0,
    "torch_dtype": "float32", "transformers_version": "4.46.0",
}

PRESETS = {
    "200m": ({**_COMMON, "hidden_size": 1024, "intermediate_size": 2816, "num_hidden_layers": 12,
              "num_attention_heads": 16, "num_key_value_heads": 4, "head_dim": 64,
              "vocab_size": 32000, "max_position_embeddings": 2048, "rope_theta": 10000.0,
              "tie_word_embeddings": False}, 5),
    "llama3.2-1b": ({**_COMMON, "hidden_size": 2048, "intermediate_size": 8192,
                     "num_hidden_layers": 16, "num_attention_heads": 32,
                     "num_key_value_heads": 8, "head_dim": 64, "vocab_size": 128256,
                     "max_position_embeddings": 4096, "rope_theta": 500000.0,
                     "tie_word_embeddings": True}, 3),
    "llama3.1-8b-4l": ({**_COMMON, "hidden_size": 4096, "intermediate_size": 14336,
                        "num_hidden_layers": 4, "num_attention_heads": 32,
                        "num_key_value_heads": 8, "head_dim": 128, "vocab_size": 128256,
                        "max_position_embeddings": 4096, "rope_theta": 500000.0,
                        "tie_word_embeddings": False}, 4),
}


def checkpoint_tensors(config: dict) -> list[tuple[str, tuple[int, ...]]]:
    """(name, shape) of every stored tensor of a LlamaForCausalLM, in transformers' order."""
    h, i, v = config["hidden_size"], config["intermediate_size"], config["vocab_size"]
    d = config.get("head_dim") or h // config["num_attention_heads"]
    q, kv = config["num_attention_heads"] * d, config["num_key_value_heads"] * d
    tensors = [("model.embed_tokens.weight", (v, h))]
    for n in range(config["num_hidden_layers"]):
        p = f"model.layers.{n}."
        tensors += [(p + "self_attn.q_proj.weight", (q, h)), (p + "self_attn.k_proj.weight", (kv, h)),
                    (p + "self_attn.v_proj.weight", (kv, h)), (p + "self_attn.o_proj.weight", (h, q)),
                    (p + "mlp.gate_proj.weight", (i, h)), (p + "mlp.up_proj.weight", (i, h)),
                    (p + "mlp.down_proj.weight", (h, i)), (p + "input_layernorm.weight", (h,)),
                    (p + "post_attention_layernorm.weight", (h,))]
    tensors.append(("model.norm.weight", (h,)))
    if not config["tie_word_embeddings"]:  # transformers stores a tied head once
        tensors.append(("lm_head.weight", (v, h)))
    return tensors


def _numel(shape) -> int:
    n = 1
    for dim in shape:
        n *= dim
    return n


def parameter_count(config: dict) -> int:
    return sum(_numel(shape) for _, shape in checkpoint_tensors(config))


def largest_tensor_bytes(config: dict) -> int:
    return 4 * max(_numel(shape) for _, shape in checkpoint_tensors(config))


def _random_tensor(seed: int, index: int, name: str, shape: tuple[int, ...]):
    import numpy as np

    data = np.random.default_rng([seed, index]).standard_normal(shape, dtype=np.float32)
    if name.endswith("norm.weight"):
        data *= 0.1
        data += 1.0
    else:
        data *= 0.02
    return data


def make_checkpoint(workdir: str, preset: str = "200m", seed: int = 0, log=print) -> str:
    """The cached checkpoint folder of ``preset``, written first (staged, then renamed) if needed."""
    from mobius.tiny.tokenizer import write_tiny_tokenizer
    from mobius.weights.safetensors_writer import write_sharded

    config, shards = PRESETS[preset]
    folder = os.path.join(workdir, f"llama-{preset}-f32-v{CHECKPOINT_VERSION}-seed{seed}")
    if os.path.isfile(os.path.join(folder, "model.safetensors.index.json")):
        return folder
    os.makedirs(workdir, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=f".llama-{preset}-", dir=workdir)
    log(f"bench: writing a {parameter_count(config) / 1e6:.0f}M-parameter checkpoint to {folder}")
    start = time.perf_counter()
    try:
        with open(os.path.join(staging, "config.json"), "w") as f:
            json.dump(config, f, indent=2)
        with open(os.path.join(staging, "generation_config.json"), "w") as f:
            json.dump({k: config[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id")}
                      | {"do_sample": False, "transformers_version": "4.46.0"}, f, indent=2)
        lazy = [(name, (lambda i=i, name=name, shape=shape: _random_tensor(seed, i, name, shape)))
                for i, (name, shape) in enumerate(checkpoint_tensors(config))]
        write_sharded(staging, lazy, shards)
        # A 600-token BPE vocabulary, smaller than the embedding (as in padded
        # checkpoints); neither builder nor onnxruntime-genai minds.
        write_tiny_tokenizer(staging, config["vocab_size"])
        if os.path.isdir(folder):
            shutil.rmtree(folder)
        os.rename(staging, folder)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    log(f"bench: checkpoint written in {time.perf_counter() - start:.1f} s")
    return folder
