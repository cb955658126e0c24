"""transformers' side of qwen3_vl_parity_test (the reference_cases rule runs it at build
time, //rules:references.bzl): per case a checkpoint and transformers' run on the harness's
batch (testing/qwen_vl_parity.py: write_case / load_case); "default" also the cpu test's
batches (seed 1, unpadded and left-padded).
"""

from __future__ import annotations

from mobius.tiny.presets import TINY_PRESETS

PRESET = TINY_PRESETS["tiny-qwen3_vl"]
TEXT, VISION = PRESET["text_config"], PRESET["vision_config"]


def _vision(**changes):
    return {"vision_config": {**VISION, **changes}}


def _text(**changes):
    return {"text_config": {**TEXT, **changes}}


#: name: tiny-qwen3_vl overrides (each changes the output where the default would not)
OVERRIDES = {
    "default": {},  # deepstack after vision layers 0 and 2, sections 2/3/3, 4 x 4 grid
    "deepstack_one": _vision(deepstack_visual_indexes=[1]),
    "deepstack_unordered": _vision(deepstack_visual_indexes=[2, 0]),
    "no_deepstack": _vision(deepstack_visual_indexes=[]),
    # frequencies 4, 5 and 7 read the temporal stream; a low theta makes them matter
    "sections": _text(rope_parameters={**TEXT["rope_parameters"], "mrope_section": [6, 1, 1],
                                       "rope_theta": 10.0}),
    "attention_bias": _text(attention_bias=True),
    "position_grid_6": _vision(num_position_embeddings=36),
    "vision_silu": _vision(hidden_act="silu"),
    "vision_theta": _vision(rope_parameters={"rope_type": "axial", "rope_theta": 2.0}),
    "tied": {"tie_word_embeddings": True},
}
#: the cpu test's (seed, pad) batches on the default checkpoint
CPU_RUNS = ((1, 0), (1, 3))
CASES = sorted(OVERRIDES)


def write_case(case: str, folder: str) -> None:
    from testing import qwen_vl_parity
    from testing.qwen2_5_vl_checkpoints import make_qwen2_5_vl_checkpoint

    runs = ((0, qwen_vl_parity.PAD), *(CPU_RUNS if case == "default" else ()))
    qwen_vl_parity.write_case(folder, lambda ckpt: make_qwen2_5_vl_checkpoint(
        ckpt, preset="tiny-qwen3_vl", **OVERRIDES[case]), runs)
