"""L4 for DeepSeek-V2/V3: onnxruntime-genai 0.18 greedy-generates exactly what
transformers' ``generate`` does, for the default-EP package (opset-23 Attention,
separate KV buffers) and the cpu-EP package (GroupQueryAttention, shared buffer).

genai has no DeepSeek type; it runs the package as its generic "decoder": the
latent cache is one KV head of ``head_size`` = qk_rope_head_dim + kv_lora_rank,
which genai allocates like any other cache (mobius/components/latent_attention.py).
"""

from __future__ import annotations

import pytest

og = pytest.importorskip("onnxruntime_genai")
pytest.importorskip("torch")
pytest.importorskip("transformers")

import mobius  # noqa: E402
from testing import genai_harness as harness  # noqa: E402
from testing.hf_checkpoints import randomize_zero_tensors  # noqa: E402
from testing.random_checkpoint import random_checkpoint  # noqa: E402

NEW_TOKENS = 12
THREADS = 1
PROMPTS = [[17, 93, 251, 407, 12, 999, 64, 5], [311, 28, 777]]  # no pad (0) / bos / eos ids


@pytest.fixture(scope="module", autouse=True)
def _one_torch_thread():
    import torch

    previous = torch.get_num_threads()
    torch.set_num_threads(THREADS)
    yield
    torch.set_num_threads(previous)


@pytest.mark.parametrize("ep", ["default", "cpu"])
@pytest.mark.parametrize("preset", ["tiny-deepseek-v2", "tiny-deepseek-v3"])
def test_genai_generates_like_transformers(tmp_path, preset, ep):
    folder = randomize_zero_tensors(random_checkpoint(str(tmp_path / "ckpt"), preset))
    path = mobius.build(folder, execution_provider=ep).save(str(tmp_path / "pkg"))
    assert harness.genai_config(path)["model"]["type"] == "decoder"
    genai_rows = harness.genai_generate(path, PROMPTS, NEW_TOKENS, intra_op_num_threads=THREADS)
    hf_rows, margins = harness.hf_generate(folder, PROMPTS, NEW_TOKENS, return_margins=True)
    mismatch = [f"row {i}: genai {g}\n        transformers {h} (top-1/top-2 gaps "
                f"{[round(m, 4) for m in gaps]})"
                for i, (g, h, gaps) in enumerate(zip(genai_rows, hf_rows, margins)) if g != h]
    assert not mismatch, f"{preset} {ep} package:\n" + "\n".join(mismatch)
    assert all(len(row) == NEW_TOKENS for row in genai_rows)
