"""transformers' side of exaone4_5_parity_test (the reference_cases rule runs it at build
time, //rules:references.bzl): per case a checkpoint written by transformers from the
tiny-exaone4_5 preset plus overrides, and transformers' run on the Qwen-VL harness's
left-padded batch (testing/qwen_vl_parity.py: write_case / load_case); "default" also
the cpu test's unpadded batch.
"""

from __future__ import annotations

from mobius.tiny.presets import TINY_PRESETS

PRESET = TINY_PRESETS["tiny-exaone4_5"]
TEXT, VISION = PRESET["text_config"], PRESET["vision_config"]


def _vision(**changes):
    return {"vision_config": {**VISION, **changes}}


def _text(**changes):
    return {"text_config": {**TEXT, **changes}}


#: name: tiny-exaone4_5 overrides (each changes the output where the default would not)
OVERRIDES = {
    "default": {},  # 2 query heads on 1 K/V head, layer 1 full; decoder layers 0, 1 sliding
    "windows": _vision(window_size=8, fullatt_block_indexes=[0]),
    "vision_theta": _vision(rope_parameters={"rope_type": "axial", "rope_theta": 2.0}),
    "vision_mha": _vision(num_key_value_heads=2),
    "vision_gelu": _vision(hidden_act="gelu"),
    # full attention everywhere, with RoPE (a sliding_window would take it away)
    "no_sliding_window": _text(sliding_window=None, layer_types=["full_attention"] * 3),
    "tied": {"tie_word_embeddings": True},
}
#: the cpu test's unpadded (seed, pad) batch on the default checkpoint
CPU_RUN = (1, 0)
CASES = sorted(OVERRIDES)


def write_case(case: str, folder: str) -> None:
    from testing import qwen_vl_parity
    from testing.qwen2_5_vl_checkpoints import make_qwen2_5_vl_checkpoint

    runs = ((0, qwen_vl_parity.PAD), *((CPU_RUN,) if case == "default" else ()))
    qwen_vl_parity.write_case(folder, lambda ckpt: make_qwen2_5_vl_checkpoint(
        ckpt, preset="tiny-exaone4_5", **OVERRIDES[case]), runs)
