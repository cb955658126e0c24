"""L4 for the cpu EP: onnxruntime-genai runs the cpu-EP package -- GroupQueryAttention
with ``past_present_share_buffer: true`` -- and greedy-generates exactly what
transformers generates, for every decoder family with a tiny preset.

With a shared buffer genai allocates past/present KV once at max_length
([batch, kv_heads, max_length, head_dim]) and the GQA kernel writes each
step's K/V in place; the graph's ``seqlens_k`` (total_sequence_length - 1,
padding masked through ``attention_bias``) and ``total_sequence_length``
(attention_mask width) must therefore index cache *slots*, which is what
genai's right-padded batches need. A batch of two prompts of different
lengths covers the padded row; testing/genai_harness.py documents how each
library is fed (genai right-padded, transformers left-padded).

Families whose cpu graph has no GQA (none today; see ep/cpu/cpu_fusion_test.py
for gaps) would run with separate buffers; the test records which case ran.

transformers' side (checkpoints, greedy tokens) is genai_e2e_cases.py, written at build
time (//rules:references.bzl).
"""

from __future__ import annotations

import os

import pytest

from ep.cpu import genai_e2e_cases as cases
from ep.cpu.genai_e2e_cases import NEW_TOKENS, PROMPTS
from testing import ep_suite, genai_harness as harness
from testing.reference_cases import case_dir


def _package(tmp_path_factory, family):
    import mobius

    folder = case_dir(cases, family)
    package = mobius.build(os.path.join(folder, "ckpt"), execution_provider="cpu")
    path = package.save(str(tmp_path_factory.mktemp(family) / "package-cpu"))
    return folder, package, path


def test_the_cases_are_the_decoder_families():
    assert cases.CASES == ep_suite.decoder_family_names()


@pytest.mark.parametrize("family", ep_suite.decoder_family_names())
def test_cpu_package_generates_like_transformers(tmp_path_factory, family):
    folder, package, path = _package(tmp_path_factory, family)
    config = harness.genai_config(path)
    uses_gqa = any(n.op_type == "GroupQueryAttention" for n in package.model.graph)
    assert config["search"]["past_present_share_buffer"] is uses_gqa
    assert config["model"]["decoder"]["session_options"]["provider_options"] == []

    genai_rows = harness.genai_generate(path, PROMPTS, NEW_TOKENS)
    hf_rows, margins = harness.load_hf_generate(os.path.join(folder, "transformers.json"))
    mismatch = [
        f"row {i}: genai {g}\n        transformers {h} "
        f"(top-1/top-2 gaps {[round(m, 4) for m in gaps]})"
        for i, (g, h, gaps) in enumerate(zip(genai_rows, hf_rows, margins)) if g != h]
    assert not mismatch, (f"{family} cpu package (GQA={uses_gqa}, shared KV buffer="
                          f"{uses_gqa}):\n" + "\n".join(mismatch))
    assert all(len(row) == NEW_TOKENS for row in genai_rows)


def test_shared_buffer_really_is_used_for_gqa_families(tmp_path_factory):
    """The premise of this file: the cpu EP's llama package shares its KV buffer."""
    _, package, path = _package(tmp_path_factory, "llama")
    assert harness.genai_config(path)["search"]["past_present_share_buffer"] is True
    assert sum(n.op_type == "GroupQueryAttention" for n in package.model.graph) == 2
