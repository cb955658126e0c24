"""L4 for Qwen 3.5 checkpoints as released (Qwen3_5ForConditionalGeneration and its MoE):
the decoder nested in text_config and named model.language_model.*, a vision tower beside
it (every parameter random, qwen3_5_multimodal_cases.py). mobius builds the text decoder,
as genai's qwen3_5_text / qwen3_5_moe_text types run it, and leaves the tower unread;
onnxruntime-genai greedy-generates exactly transformers' multimodal model's tokens on
text prompts (a left-padded batch there, right-padded in genai: testing/genai_harness.py).

The composite config's top-level tie_word_embeddings is the one transformers ties by
(text_config's is ignored): the top-level switch set must refuse the untied checkpoint
(its lm_head would go unread), the text_config one must change nothing.
"""

from __future__ import annotations

import os

import pytest

import mobius
from mobius.errors import WeightsError
from mobius.models import qwen3_5_multimodal_cases as cases
from mobius.models.qwen3_5_multimodal_cases import NEW_TOKENS, PROMPTS
from testing import genai_harness as harness
from testing.checkpoint_runs import checkpoint
from testing.reference_cases import case_dir
from testing.switch_checks import copy_case, edit_config

GENAI_TYPES = {"dense": "qwen3_5_text", "moe": "qwen3_5_moe_text"}


def generate(folder: str, out) -> tuple[list[list[int]], dict]:
    path = mobius.build(folder, execution_provider="default").save(str(out))
    rows = harness.genai_generate(path, PROMPTS, NEW_TOKENS, intra_op_num_threads=1)
    return rows, harness.genai_config(path)


@pytest.mark.parametrize("case", cases.CASES)
def test_genai_generates_like_the_multimodal_model(tmp_path, case):
    rows, config = generate(checkpoint(cases, case), tmp_path / "pkg")
    assert config["model"]["type"] == GENAI_TYPES[case]
    expected, margins = harness.load_hf_generate(os.path.join(case_dir(cases, case),
                                                              "transformers.json"))
    assert rows == expected, f"{case}: genai {rows}\ntransformers {expected} (gaps {margins})"


def test_top_level_tie_word_embeddings_is_the_one_read(tmp_path):
    folder = copy_case(cases, "dense", tmp_path / "text_tied")
    raw = cases.multimodal_config("dense")
    edit_config(folder, {"text_config": {**raw["text_config"], "tie_word_embeddings": True}})
    rows, _ = generate(folder, tmp_path / "pkg")
    expected, _ = harness.load_hf_generate(os.path.join(case_dir(cases, "dense"),
                                                        "transformers.json"))
    assert rows == expected
    edit_config(folder, {"tie_word_embeddings": True})
    with pytest.raises(WeightsError, match="lm_head.weight"):
        mobius.build(folder, execution_provider="default").save(str(tmp_path / "tied"))
