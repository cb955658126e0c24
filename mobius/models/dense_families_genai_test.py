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

import pytest

import mobius
from mobius.models.registry import cohort
from mobius.package.genai_config import genai_model_type
from testing import genai_harness as harness
from testing.hf_checkpoints import randomize_zero_tensors
from testing.random_checkpoint import random_checkpoint

NEW_TOKENS = 12
THREADS = 1
PROMPTS = [[17, 93, 251, 407, 12, 999, 64, 5], [311, 28, 777]]  # no pad (0) / bos / eos ids
#: the families that declare the "genai" cohort (mobius/models/family.py): dense decoders,
#: MoE routings, Mamba2 + attention (genai carries each Mamba layer's conv and recurrent
#: state; right-padded prompts: the short row's state stops at its last token) and
#: short-convolution + attention hybrids (genai's conv state cache)
PRESETS = [family.tiny_preset for family in cohort("genai")]
#: presets whose zero-initialized tensors (DeepSeek-V3's e_score_correction_bias, LFM2-MoE's
#: expert_bias) decide routing: randomized so that dropping them changes the tokens
RANDOMIZE_ZEROS = {"tiny-deepseek-v2", "tiny-deepseek-v3", "tiny-glm4_moe", "tiny-lfm2-moe"}


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    yield
    torch.set_num_threads(previous)


@pytest.mark.parametrize("ep", ["default", "cpu"])
@pytest.mark.parametrize("preset", PRESETS)
def test_genai_generates_like_transformers(tmp_path, preset, ep):
    folder = random_checkpoint(str(tmp_path / "ckpt"), preset)
    if preset in RANDOMIZE_ZEROS:
        folder = randomize_zero_tensors(folder)
    package = mobius.build(folder, execution_provider=ep)
    path = package.save(str(tmp_path / "pkg"))
    config = harness.genai_config(path)
    assert config["model"]["type"] == genai_model_type(package.config.model_type)
    genai_rows = harness.genai_generate(path, PROMPTS, NEW_TOKENS, intra_op_num_threads=THREADS)
    hf_rows, margins = harness.hf_generate(folder, PROMPTS, NEW_TOKENS, return_margins=True)
    mismatch = [f"row {i}: genai {g}\n        transformers {h} (top-1/top-2 gaps "
                f"{[round(m, 4) for m in gaps]})"
                for i, (g, h, gaps) in enumerate(zip(genai_rows, hf_rows, margins)) if g != h]
    assert not mismatch, f"{preset} {ep} package:\n" + "\n".join(mismatch)
    assert all(len(row) == NEW_TOKENS for row in genai_rows)
