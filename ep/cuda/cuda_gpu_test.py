"""GPU (tag "gpu"; `./bazelw test //... --config=gpu`): the cuda packages on onnxruntime's CUDA EP.

* L3 on the device: every decoder family x (f16, bf16, f32) cuda package runs on
  CUDAExecutionProvider and matches float32 transformers (prefill of a left-padded
  batch + 3 cached greedy steps, testing/model_runs.f32_parity) within the tolerances
  mobius/models/parity_test.py justifies: 1e-4 for f32 (TF32 off), 4 eps(dtype) x the
  logit scale for f16 / bf16.
* L4 on the device: onnxruntime-genai (CUDA build) greedy-generates transformers' tokens
  from the f32 cuda package for Llama, Qwen3, a MoE (Qwen3-MoE) and Whisper.

A machine without a GPU or without the CUDA builds fails (testing/gpu.py).
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import mobius
from testing import ep_suite, genai_harness as harness, gpu
from testing.hf_checkpoints import load_hf_model, make_hf_checkpoint
from testing.model_runs import BuiltPackage, f32_parity

F32_TOLERANCE = 1e-4
EPS = {"f16": 2.0**-10, "bf16": 2.0**-7}
NEW_TOKENS = 12
PROMPTS = [[17, 93, 251, 407, 12, 999, 64, 5], [311, 28, 777]]
OVERRIDES = {"initializer_range": 0.2}  # varied continuations (see ep/cpu/genai_e2e_test.py)


@pytest.fixture(scope="module")
def provider():
    return gpu.require_provider("cuda")


@pytest.fixture(scope="module")
def checkpoints(tmp_path_factory):
    return ep_suite.Checkpoints(tmp_path_factory.mktemp("checkpoints"))


@pytest.mark.parametrize("family, dtype", ep_suite.matrix("cuda"))
def test_cuda_package_matches_transformers_on_the_gpu(family, dtype, provider, checkpoints,
                                                      tmp_path):
    folder = checkpoints.folder(family)
    package = mobius.build(folder, execution_provider="cuda", dtype=dtype, prefill_logits="all")
    built = BuiltPackage(package.save(str(tmp_path / "pkg")), package.config, dtype)
    session = gpu.session(built.model_path, provider, use_tf32="0")
    run = f32_parity(built, load_hf_model(folder), session=session)
    scale = max(1.0, max(float(np.abs(h).max()) for h in run.hf_steps))
    atol = F32_TOLERANCE if dtype == "f32" else 4 * EPS[dtype] * scale
    print(f"cuda parity {family} {dtype}: max |logit diff| {run.max_abs_diff:.3g} "
          f"(tolerance {atol:.3g})")
    assert all(np.isfinite(step).all() for step in run.onnx_steps)
    assert run.max_abs_diff <= atol, f"{family} {dtype}: {run.max_abs_diff:.3g} > {atol:.3g}"


@pytest.mark.parametrize("family", ["llama", "qwen3", "qwen3_moe"])
def test_genai_cuda_greedy_tokens_match_transformers(family, provider, tmp_path):
    folder = make_hf_checkpoint(str(tmp_path / "ckpt"), ep_suite.family(family).tiny_preset,
                                **OVERRIDES)
    path = mobius.build(folder, execution_provider="cuda", dtype="f32",
                        prefill_logits="all").save(str(tmp_path / "pkg"))
    options = harness.genai_config(path)["model"]["decoder"]["session_options"]
    assert [list(o) for o in options["provider_options"]] == [["cuda"]]
    got = harness.genai_generate(path, PROMPTS, NEW_TOKENS)
    expected = harness.hf_generate(folder, PROMPTS, NEW_TOKENS)
    print(f"genai cuda {family}: {got}")
    assert got == expected, f"{family}: genai {got} != transformers {expected}"


def test_genai_cuda_whisper_matches_transformers(provider, tmp_path):
    import onnxruntime_genai as og
    import torch

    preset = ep_suite.family("whisper").tiny_preset
    folder = make_hf_checkpoint(str(tmp_path / "ckpt"), preset, max_source_positions=1500,
                                init_std=0.2)  # genai takes 3000 frames only
    path = mobius.build(folder, execution_provider="cuda", dtype="f32",
                        prefill_logits="all").save(str(tmp_path / "pkg"))
    hf_model = load_hf_model(folder)
    start = hf_model.config.decoder_start_token_id
    prompt, length = [start, 5, 7, 9], 24
    mels = hf_model.config.num_mel_bins
    features = np.random.default_rng(0).standard_normal((1, mels, 3000)).astype(np.float32)
    model = og.Model(path)
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=length, min_length=length, do_sample=False)
    generator = og.Generator(model, params)
    generator.set_model_input("audio_features", features)
    generator.append_tokens(np.array([prompt], dtype=np.int32))
    while not generator.is_done():
        generator.generate_next_token()
    got = [int(t) for t in generator.get_sequence(0)[len(prompt):]]
    with torch.no_grad():
        out = hf_model.generate(input_features=torch.from_numpy(features),
                                decoder_input_ids=torch.tensor([prompt]),
                                max_new_tokens=length - len(prompt),
                                min_new_tokens=length - len(prompt), do_sample=False)
    row = out[0].tolist()
    expected = row[len(prompt):] if row[:len(prompt)] == prompt else row
    print(f"genai cuda whisper: {got}")
    assert got == expected


def test_packages_really_target_cuda(tmp_path):
    """Runs without a GPU too (in the gpu target): the premise that these are cuda packages."""
    folder = make_hf_checkpoint(str(tmp_path / "ckpt"), "tiny-llama")
    path = mobius.build(folder, execution_provider="cuda", dtype="f16",
                        prefill_logits="all").save(str(tmp_path / "p"))
    assert os.path.isfile(os.path.join(path, "model.onnx"))
    assert harness.genai_config(path)["model"]["decoder"]["session_options"][
        "provider_options"] == [{"cuda": {}}]
