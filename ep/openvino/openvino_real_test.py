"""L6: packages built for --ep openvino, run on the real OpenVINO EP (CPU device) here.

For a cohort (dense decoder, MoE, hybrid, encoder) x the EP's dtypes, and int4: the
session is created on onnxruntime-openvino (testing/openvino_backend.py); the nodes
that ran outside OpenVINO are exactly the pinned ones (ELSEWHERE, each with its
reason; none today); logits and present KV match onnxruntime's CPU EP on the same
package within testing/ep_parity's tolerances; onnxruntime-genai's greedy tokens on
OpenVINO equal its tokens on the CPU EP.
"""

from __future__ import annotations

import json
import os

import numpy as np
import onnx_ir as ir
import onnxruntime as ort
import pytest

import mobius
from testing import real_ep_checks
from testing.genai_harness import genai_generate
from testing.openvino_backend import BACKEND
from testing.real_backend import Job

DTYPES = {"f32": ir.DataType.FLOAT, "f16": ir.DataType.FLOAT16}
#: (tiny model, dtype, quant): dense decoder, MoE, hybrid (short conv + attention), encoder.
COHORT = [("tiny-llama", "f32", None), ("tiny-llama", "f16", None), ("tiny-llama", "f32", "int4"),
          ("tiny-qwen3-moe", "f32", None), ("tiny-lfm2", "f32", None), ("tiny-bert", "f32", None)]
#: (tiny model, dtype, quant) -> {op run outside OpenVINO: why}; like a golden, update on purpose.
ELSEWHERE: dict[tuple, dict[str, str]] = {}
#: genai drives these (decoder packages); tokens compared with genai on the CPU EP.
GENAI = [("tiny-llama", "f32", None), ("tiny-llama", "f32", "int4")]


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    built = {}

    def get(name, dtype, quant):
        key = (name, dtype, quant)
        if key not in built:
            folder = str(tmp_path_factory.mktemp(f"{name}-{dtype}-{quant}"))
            mobius.build(name, execution_provider=BACKEND.ep, dtype=dtype, quant=quant).save(folder)
            built[key] = folder
        return built[key]

    return get


@pytest.mark.parametrize("name,dtype,quant", COHORT)
def test_runs_on_openvino_like_the_cpu_ep(packages, name, dtype, quant):
    model = os.path.join(packages(name, dtype, quant), "model.onnx")
    cpu = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    feeds = real_ep_checks.feeds(cpu.get_inputs())
    (run,) = BACKEND.run_sessions([Job(model, feeds, DTYPES[dtype], quant is not None)])
    assert run.error is None, run.error
    pinned = ELSEWHERE.get((name, dtype, quant), {})
    assert run.elsewhere() == sorted(pinned), run.summary()
    assert run.on_ep() >= 1, run.summary()
    names = [o.name for o in cpu.get_outputs()]
    for output_name, expected in zip(names, cpu.run(None, feeds)):
        got = run.outputs[output_name].astype(np.float32)
        diff = float(np.abs(got - expected.astype(np.float32)).max())
        assert diff <= real_ep_checks.tolerance(dtype, expected), (
            f"{output_name}: {diff:.3g} from the CPU EP")


@pytest.mark.parametrize("name,dtype,quant", GENAI)
def test_genai_greedy_tokens_equal_the_cpu_ep(packages, tmp_path, name, dtype, quant):
    package = packages(name, dtype, quant)
    prompts = [[5, 17, 42, 9, 33]]
    run = BACKEND.generate(package, prompts, max_new_tokens=8)
    assert run.elsewhere() == sorted(ELSEWHERE.get((name, dtype, quant), {})), run.summary()
    cpu = real_ep_checks.on_cpu(package, str(tmp_path / "cpu"))
    assert run.tokens == genai_generate(cpu, prompts, 8)


def test_packages_ask_openvino_for_the_build_precision(packages):
    """genai_config carries the precision hint the EP needs: f32 for f32 and f16 builds
    (bf16 otherwise on CPUs with bf16 units, f16 ones included: mobius/ep/openvino.py)."""
    for (name, dtype, quant), hint in {("tiny-llama", "f32", None): "f32",
                                       ("tiny-llama", "f16", None): "f32"}.items():
        with open(os.path.join(packages(name, dtype, quant), "genai_config.json")) as f:
            options = json.load(f)["model"]["decoder"]["session_options"]["provider_options"]
        (entry,) = options
        load_config = json.loads(entry["OpenVINO"]["load_config"])
        assert load_config == {"CPU": {"INFERENCE_PRECISION_HINT": hint}}
