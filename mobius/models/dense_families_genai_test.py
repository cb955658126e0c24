"""L4 for the decoder families of the "genai" cohort (dense, gpt-oss, deepseek, phimoe, the hybrids), on
checkpoints with every parameter random (biases included): onnxruntime-genai
greedy-generates exactly what transformers' ``generate`` does, for the default-EP
package (standard Attention, separate KV buffers) and the cpu-EP package
(GroupQueryAttention, shared buffer).

A batch of two prompts of different lengths covers padding; testing/genai_harness.py
documents how each library is fed. genai_config's model.type is the family's own
type where onnxruntime-genai 0.18 names it (olmo, nemotron, ernie4_5, lfm2, lfm2_moe), else its
generic "decoder" (mobius/package/genai_config.py). LFM2's conv states travel as genai's
conv state cache; the short prompt's right padding is exact for them too
(mobius/components/short_conv.py).
"""

from __future__ import annotations

import os

import pytest

import mobius
from mobius.models import dense_families_genai_cases as cases
from mobius.models.dense_families_genai_cases import NEW_TOKENS, PROMPTS
from mobius.package.genai_config import genai_model_type
from testing import genai_harness as harness
from testing.reference_cases import case_dir


@pytest.mark.parametrize("ep", ["default", "cpu"])
@pytest.mark.parametrize("preset", cases.CASES)
def test_genai_generates_like_transformers(tmp_path, preset, ep):
    folder = case_dir(cases, preset)
    package = mobius.build(os.path.join(folder, "ckpt"), execution_provider=ep)
    path = package.save(str(tmp_path / "pkg"))
    config = harness.genai_config(path)
    assert config["model"]["type"] == genai_model_type(package.config.model_type)
    genai_rows = harness.genai_generate(path, PROMPTS, NEW_TOKENS)
    hf_rows, margins = harness.load_hf_generate(os.path.join(folder, "transformers.json"))
    mismatch = [f"row {i}: genai {g}\n        transformers {h} (top-1/top-2 gaps "
                f"{[round(m, 4) for m in gaps]})"
                for i, (g, h, gaps) in enumerate(zip(genai_rows, hf_rows, margins)) if g != h]
    assert not mismatch, f"{preset} {ep} package:\n" + "\n".join(mismatch)
    assert all(len(row) == NEW_TOKENS for row in genai_rows)
