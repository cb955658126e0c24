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
import shutil

import numpy as np
import onnx_ir as ir
import onnxruntime as ort
import pytest

import mobius
from testing import openvino_backend as ov
from testing.ep_parity import F32_ATOL, HALF_ULPS, spacing
from testing.genai_harness import genai_generate

DTYPES = {"f32": ir.DataType.FLOAT, "f16": ir.DataType.FLOAT16}
#: (tiny model, dtype, quant): dense decoder, MoE, hybrid (short conv + attention), encoder.
COHORT = [("tiny-llama", "f32", None), ("tiny-llama", "f16", None), ("tiny-llama", "f32", "int4"),
          ("tiny-qwen3-moe", "f32", None), ("tiny-lfm2", "f32", None), ("tiny-bert", "f32", None)]
#: (tiny model, dtype, quant) -> {op run outside OpenVINO: why}; like a golden, update on purpose.
ELSEWHERE: dict[tuple, dict[str, str]] = {}
#: genai drives these (decoder packages); tokens compared with genai on the CPU EP.
GENAI = [("tiny-llama", "f32", None), ("tiny-llama", "f32", "int4")]
PAST, NEW = 3, 4  # cache slots already filled, tokens in the step


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    built = {}

    def get(name, dtype, quant):
        key = (name, dtype, quant)
        if key not in built:
            folder = str(tmp_path_factory.mktemp(f"{name}-{dtype}-{quant}"))
            mobius.build(name, execution_provider=ov.EP, dtype=dtype, quant=quant).save(folder)
            built[key] = folder
        return built[key]

    return get


def _feeds(session: ort.InferenceSession) -> dict[str, np.ndarray]:
    """A step with PAST cached slots and NEW tokens, random cache, every mask slot on."""
    rng = np.random.default_rng(0)
    dims = {"batch_size": 1, "sequence_length": NEW, "past_sequence_length": PAST,
            "total_sequence_length": PAST + NEW}
    numpy = {"tensor(int64)": np.int64, "tensor(int32)": np.int32, "tensor(float)": np.float32,
             "tensor(float16)": np.float16}
    feeds = {}
    for arg in session.get_inputs():
        shape = [d if isinstance(d, int) else dims.get(d, 1 if "batch" in d else NEW)
                 for d in arg.shape]
        kind = numpy[arg.type]
        if "mask" in arg.name:
            feeds[arg.name] = np.ones(shape, kind)
        elif "token_type" in arg.name:
            feeds[arg.name] = np.zeros(shape, kind)
        elif "position" in arg.name:
            feeds[arg.name] = np.arange(PAST, PAST + NEW, dtype=kind).reshape(shape)
        elif np.issubdtype(kind, np.integer):
            feeds[arg.name] = rng.integers(1, 50, shape).astype(kind)
        else:
            feeds[arg.name] = rng.standard_normal(shape).astype(kind)
    return feeds


def _tolerance(dtype: str, reference: np.ndarray) -> float:
    if dtype == "f32":
        return F32_ATOL
    return HALF_ULPS * spacing(float(np.abs(reference.astype(np.float32)).max()), dtype)


@pytest.mark.parametrize("name,dtype,quant", COHORT)
def test_runs_on_openvino_like_the_cpu_ep(packages, name, dtype, quant):
    model = os.path.join(packages(name, dtype, quant), "model.onnx")
    cpu = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    feeds = _feeds(cpu)
    run = ov.run_session(model, feeds, DTYPES[dtype], quantized=quant is not None)
    pinned = ELSEWHERE.get((name, dtype, quant), {})
    assert run.not_on_openvino() == sorted(pinned), ov.summary(run)
    assert run.openvino_subgraphs() >= 1, ov.summary(run)
    names = [o.name for o in cpu.get_outputs()]
    for output_name, expected in zip(names, cpu.run(None, feeds)):
        got = run.outputs[output_name].astype(np.float32)
        diff = float(np.abs(got - expected.astype(np.float32)).max())
        assert diff <= _tolerance(dtype, expected), f"{output_name}: {diff:.3g} from the CPU EP"


@pytest.mark.parametrize("name,dtype,quant", GENAI)
def test_genai_greedy_tokens_equal_the_cpu_ep(packages, tmp_path, name, dtype, quant):
    package = packages(name, dtype, quant)
    prompts = [[5, 17, 42, 9, 33]]
    run = ov.generate(package, prompts, max_new_tokens=8)
    assert run.not_on_openvino() == sorted(ELSEWHERE.get((name, dtype, quant), {})), ov.summary(run)
    cpu = genai_generate(_on_cpu(package, tmp_path), prompts, 8, intra_op_num_threads=1)
    assert run.tokens == cpu


def _on_cpu(package: str, tmp_path) -> str:
    """A copy of ``package`` whose genai_config names no provider (genai's CPU EP)."""
    copy = shutil.copytree(package, tmp_path / "cpu")
    with open(copy / "genai_config.json") as f:
        config = json.load(f)
    config["model"]["decoder"]["session_options"]["provider_options"] = []
    with open(copy / "genai_config.json", "w") as f:
        json.dump(config, f)
    return str(copy)


def test_packages_ask_openvino_for_the_build_precision(packages):
    """genai_config carries the precision hint the EP needs (bf16 on AMX CPUs otherwise)."""
    for (name, dtype, quant), hint in {("tiny-llama", "f32", None): "f32",
                                       ("tiny-llama", "f16", None): "f16"}.items():
        with open(os.path.join(packages(name, dtype, quant), "genai_config.json")) as f:
            options = json.load(f)["model"]["decoder"]["session_options"]["provider_options"]
        (entry,) = options
        load_config = json.loads(entry["OpenVINO"]["load_config"])
        assert load_config == {"CPU": {"INFERENCE_PRECISION_HINT": hint}}
