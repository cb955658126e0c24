"""transformers' side of qwen3_5_vl_parity_test (the reference_cases rule runs it at build
time, //rules:references.bzl): per case a tiny Qwen 3.5 checkpoint written by transformers
(every parameter random) and its run on the Qwen-VL harness's batch
(testing/qwen_vl_parity.py: write_case / load_case).
"""

from __future__ import annotations

from mobius.tiny.presets import TINY_PRESETS

#: case: (preset, overrides): each changes the output where the default would not
VARIANTS = {
    "dense": ("tiny-qwen3_5_vl", {}),  # M-RoPE sections 2 / 2 / 2 interleaved
    "moe": ("tiny-qwen3_5_moe_vl", {}),
    # frequencies 4 and 5 on the temporal stream (the default: height, width), a low theta
    # so that they matter
    "dense_sections": ("tiny-qwen3_5_vl", {"text_config": {
        **TINY_PRESETS["tiny-qwen3_5_vl"]["text_config"],
        "rope_parameters": {**TINY_PRESETS["tiny-qwen3_5_vl"]["text_config"]["rope_parameters"],
                            "mrope_section": [4, 1, 1], "rope_theta": 10.0}}}),
}
CASES = sorted(VARIANTS)


def write_case(case: str, folder: str) -> None:
    from testing import qwen_vl_parity
    from testing.qwen2_5_vl_checkpoints import make_qwen2_5_vl_checkpoint

    preset, overrides = VARIANTS[case]
    qwen_vl_parity.write_case(folder, lambda ckpt: make_qwen2_5_vl_checkpoint(
        ckpt, preset=preset, **overrides))
