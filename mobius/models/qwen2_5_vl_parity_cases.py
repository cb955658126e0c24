"""transformers' side of qwen2_5_vl_parity_test (the reference_cases rule runs it at build
time, //rules:references.bzl): per case a checkpoint and transformers' run on the harness's
batch (testing/qwen_vl_parity.py: write_case / load_case); "default" also the cpu test's
batches (seed 1, unpadded and left-padded).
"""

from __future__ import annotations

_VISION = {"depth": 2, "hidden_size": 32, "intermediate_size": 40, "num_heads": 2,
           "in_channels": 3, "patch_size": 4, "spatial_merge_size": 2,
           "temporal_patch_size": 2, "out_hidden_size": 64, "tokens_per_second": 4,
           "hidden_act": "silu", "model_type": "qwen2_5_vl_vision"}

#: name: tiny-qwen2_5_vl overrides (each changes the output where the default would not)
OVERRIDES = {
    "default": {},  # M-RoPE sections 2/3/3, layer 1 full attention, 2 x 2 merged-token windows
    "sections_full_first_small_windows": {
        "vision_config": {**_VISION, "window_size": 8, "fullatt_block_indexes": [0]},
    },
    "tied": {"tie_word_embeddings": True},
}
_SECTIONS = [4, 2, 2]
#: the cpu test's (seed, pad) batches on the default checkpoint
CPU_RUNS = ((1, 0), (1, 3))
CASES = sorted(OVERRIDES)


def write_case(case: str, folder: str) -> None:
    from testing import qwen_vl_parity
    from testing.qwen2_5_vl_checkpoints import make_qwen2_5_vl_checkpoint

    overrides = dict(OVERRIDES[case])
    if case == "sections_full_first_small_windows":
        from mobius.tiny.presets import TINY_PRESETS

        text = dict(TINY_PRESETS["tiny-qwen2_5_vl"]["text_config"])
        text["rope_parameters"] = {**text["rope_parameters"], "mrope_section": _SECTIONS}
        overrides["text_config"] = text
    runs = ((0, qwen_vl_parity.PAD), *(CPU_RUNS if case == "default" else ()))
    qwen_vl_parity.write_case(folder, lambda ckpt: make_qwen2_5_vl_checkpoint(ckpt, **overrides),
                              runs)
