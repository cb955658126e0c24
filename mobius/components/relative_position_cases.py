"""transformers' side of relative_position_test (//rules:references.bzl): T5Attention's
bucket of every distance ("buckets") and its bias on a random embedding ("bias")."""

from __future__ import annotations

import numpy as np

HEADS = 3
CONFIGS = [(8, 6), (16, 10), (32, 128), (32, 20)]  # (num_buckets, max_distance)
BIASES = [(False, 13, 0), (True, 9, 0), (True, 1, 12)]  # (decoder, queries, past)
BIAS_BUCKETS, BIAS_DISTANCE = 16, 10
CASES = ["bias", "buckets"]


def table_key(num_buckets: int, max_distance: int, bidirectional: bool) -> str:
    return f"{num_buckets}_{max_distance}_{bidirectional}"


def bias_key(decoder: bool, queries: int, past: int) -> str:
    return f"{decoder}_{queries}_{past}"


def _buckets() -> dict[str, np.ndarray]:
    """Per table_key: the buckets of distances -3 * max_distance .. 3 * max_distance."""
    import torch
    from transformers.models.t5.modeling_t5 import T5Attention

    arrays = {}
    for num_buckets, max_distance in CONFIGS:
        for bidirectional in (True, False):
            distance = torch.arange(-3 * max_distance, 3 * max_distance + 1)
            arrays[table_key(num_buckets, max_distance, bidirectional)] = (
                T5Attention._relative_position_bucket(
                    distance, bidirectional=bidirectional, num_buckets=num_buckets,
                    max_distance=max_distance).numpy())
    return arrays


def _biases() -> dict[str, np.ndarray]:
    """The embedding ("weight") and, per bias_key, T5Attention.compute_bias with it."""
    import torch
    from transformers.models.t5.modeling_t5 import T5Attention, T5Config

    weight = np.random.default_rng(0).standard_normal((BIAS_BUCKETS, HEADS)).astype(np.float32)
    arrays = {"weight": weight}
    for decoder, queries, past in BIASES:
        config = T5Config(d_model=12, d_kv=4, num_heads=HEADS, is_decoder=decoder,
                          relative_attention_num_buckets=BIAS_BUCKETS,
                          relative_attention_max_distance=BIAS_DISTANCE)
        attention = T5Attention(config, has_relative_attention_bias=True)
        with torch.no_grad():
            attention.relative_attention_bias.weight.copy_(torch.from_numpy(weight))
            arrays[bias_key(decoder, queries, past)] = attention.compute_bias(
                queries, past + queries, past_seen_tokens=past).numpy()
    return arrays


def write_case(case: str, folder: str) -> None:
    """arrays.npz of _buckets() or _biases()."""
    from testing import recorded_arrays

    recorded_arrays.save(folder, _buckets() if case == "buckets" else _biases())
