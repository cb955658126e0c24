"""L6: packages built for --ep webgpu, run on the real WebGPU EP here (Dawn on Mesa's lavapipe).

For a cohort (dense decoder f32 / f16 / int4, MoE, hybrid, encoder, VLM), every model
of the package the EP suites built (//ep/webgpu:builds) runs on onnxruntime-webgpu
(testing/webgpu_backend.py, all in one worker process): the ops that ran outside
WebGPU are exactly the pinned ones (ELSEWHERE, each op with its reason in WHY); the
outputs match onnxruntime's CPU EP on the same model within testing/ep_parity's
tolerances; onnxruntime-genai's greedy tokens on WebGPU equal its tokens on the CPU EP.
"""

from __future__ import annotations

import os
from collections import Counter

import numpy as np
import onnx_ir as ir
import onnxruntime as ort
import pytest

from testing import real_ep_checks
from testing.ep_suite import Builds, Checkpoints
from testing.genai_harness import genai_generate
from testing.real_backend import Job
from testing.webgpu_backend import BACKEND

DTYPES = {"f32": ir.DataType.FLOAT, "f16": ir.DataType.FLOAT16}
#: (family, dtype, quant): dense decoder, sliding-window decoder, MoE, hybrid (short conv +
#: attention), encoder, VLM.
#: Each costs lavapipe 5-20 s of cold shader compiling (Qwen2.5-VL, 13 s, is left to
#: docs/eps.md's measurement: its vision tower's Attention runs on the CPU EP).
COHORT = [("llama", "f32", None), ("llama", "f16", None), ("llama", "f16", "int4"),
          ("mistral", "f16", None), ("qwen3_moe", "f16", None), ("lfm2", "f16", None),
          ("bert", "f16", None), ("llava", "f16", None)]
#: genai drives these (decoder packages); tokens compared with genai on the CPU EP.
GENAI = [("llama", "f32", None), ("llama", "f16", None), ("llama", "f16", "int4")]

_MASK = "int64 index math on the attention mask / position ids"
_CPU_PREFERRED = " (onnxruntime places shape-like int64 subgraphs on the CPU EP)"
#: op run outside WebGPU -> why (measured with onnxruntime-webgpu 1.27.0, verbose log)
WHY = {
    "Range": "no WebGPU kernel (Range)",
    "Squeeze": "no WebGPU kernel for its int64 input",
    "Unsqueeze": "no WebGPU kernel for its int64 input",
    "NonZero": "no WebGPU kernel (NonZero): the MoE's token routing",
    "ConstantOfShape": "feeds NonZero's routing on the CPU" + _CPU_PREFERRED,
    "Transpose": "transposes NonZero's int64 indices" + _CPU_PREFERRED,
    **{op: _MASK + _CPU_PREFERRED for op in (
        "Add", "Cast", "Concat", "CumSum", "Equal", "Expand", "GreaterOrEqual", "Less",
        "LessOrEqual", "Min", "Mul", "Neg", "Or", "ReduceMax", "Reshape", "Slice", "Split",
        "Sub", "Where")},
}
#: (family, dtype, quant, model key) -> {op: nodes run outside WebGPU}; like a golden,
#: update on purpose (every op needs its entry in WHY).
_DECODER = {"Add": 1, "Cast": 7, "Concat": 3, "LessOrEqual": 1, "Range": 2, "Slice": 3,
            "Split": 1, "Squeeze": 3, "Sub": 1, "Unsqueeze": 2}
_EMBEDDING = {"Cast": 5, "Concat": 1, "CumSum": 1, "Equal": 1, "Min": 1, "Or": 1,
              "Reshape": 1, "Slice": 2, "Sub": 1, "Where": 2}
ELSEWHERE: dict[tuple, dict[str, int]] = {
    ("llama", "f32", None, "model"): _DECODER,
    ("llama", "f16", None, "model"): _DECODER,
    ("llama", "f16", "int4", "model"): {**_DECODER, "Cast": 8, "Concat": 1},
    # the window's token distances (mobius/components/attention_mask.py: the query's token
    # count sliced from attention_mask's); the Unsqueeze EqualRankBroadcast gives the bool
    # grid runs on WebGPU
    ("mistral", "f16", None, "model"): {**_DECODER, "CumSum": 1, "Less": 1, "Slice": 4,
                                        "Sub": 3, "Unsqueeze": 4},
    ("qwen3_moe", "f16", None, "model"): {**_DECODER, "Concat": 4, "ConstantOfShape": 1,
                                          "NonZero": 6, "Transpose": 6},
    ("lfm2", "f16", None, "model"): {
        "Add": 3, "Cast": 9, "Concat": 4, "Equal": 1, "Expand": 1, "LessOrEqual": 1, "Mul": 1,
        "Neg": 1, "Or": 1, "Range": 3, "ReduceMax": 1, "Reshape": 1, "Slice": 4, "Split": 1,
        "Squeeze": 4, "Sub": 1, "Unsqueeze": 3},
    ("bert", "f16", None, "model"): {"Add": 1, "Cast": 3, "CumSum": 1, "GreaterOrEqual": 1,
                                     "Mul": 1, "Sub": 1, "Unsqueeze": 1},
    ("llava", "f16", None, "vision"): {"Cast": 1, "Concat": 1, "Or": 1},
    ("llava", "f16", None, "embedding"): _EMBEDDING,
    ("llava", "f16", None, "model"): _DECODER,
}


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    return Builds(Checkpoints(tmp_path_factory.mktemp("hf")))


def exact_int4(model: ir.Model) -> ir.Model:
    """``model`` with every MatMulNBits at accuracy_level 0, the CPU EP's reference for an
    int4 package here: at level 4 the CPU EP quantizes activations to int8 per block,
    WebGPU multiplies them as they are (logits 1e-2 from the level-4 CPU run in f32,
    4e-7 from the level-0 one, measured)."""
    for node in model.graph:
        if node.op_type == "MatMulNBits":
            node.attributes["accuracy_level"] = ir.AttrInt64("accuracy_level", 0)
    return model


@pytest.fixture(scope="module")
def runs(builds, tmp_path_factory):
    """Every cohort model's run on WebGPU, one worker for all, and its CPU-EP reference."""
    folder = tmp_path_factory.mktemp("models")
    jobs, references = {}, {}
    for name, dtype, quant in COHORT:
        built = builds.get(name, "webgpu", dtype, quant)
        for key, data in built.serialized.items():
            path = str(folder / f"{name}-{dtype}-{quant}-{key}.onnx")
            with open(path, "wb") as f:
                f.write(data)
            reference = ir.serde.serialize_model(exact_int4(ir.load(path))).SerializeToString()
            cpu = ort.InferenceSession(reference, providers=["CPUExecutionProvider"])
            feeds = real_ep_checks.feeds(cpu.get_inputs())
            jobs[name, dtype, quant, key] = Job(path, feeds, DTYPES[dtype], quant is not None)
            references[name, dtype, quant, key] = dict(zip(
                [o.name for o in cpu.get_outputs()], cpu.run(None, feeds)))
    done = dict(zip(jobs, BACKEND.run_sessions(list(jobs.values()))))
    return {key: (done[key], references[key]) for key in jobs}


@pytest.mark.parametrize("name,dtype,quant", COHORT)
def test_runs_on_webgpu_like_the_cpu_ep(runs, name, dtype, quant):
    models = {key: runs[key] for key in runs if key[:3] == (name, dtype, quant)}
    assert models, f"{name} {dtype} {quant}: no model built"
    for key, (run, expected) in models.items():
        assert run.error is None, f"{key}: {run.error}"
        assert dict(Counter(run.elsewhere())) == ELSEWHERE.get(key, {}), f"{key}: {run.summary()}"
        assert run.on_ep() > 0, run.summary()
        for output_name, reference in expected.items():
            got = run.outputs[output_name].astype(np.float32)
            diff = float(np.abs(got - reference.astype(np.float32)).max())
            assert diff <= real_ep_checks.tolerance(dtype, reference), (
                f"{key} {output_name}: {diff:.3g} from the CPU EP")


def test_every_op_kept_off_webgpu_has_its_reason():
    ops = {op for pinned in ELSEWHERE.values() for op in pinned}
    assert sorted(ops - set(WHY)) == []


@pytest.mark.parametrize("name,dtype,quant", GENAI)
def test_genai_greedy_tokens_equal_the_cpu_ep(builds, tmp_path, name, dtype, quant):
    package = _saved(builds, name, dtype, quant, str(tmp_path / "package"))
    prompts = [[5, 17, 42, 9, 33]]
    run = BACKEND.generate(package, prompts, max_new_tokens=8)
    pinned = ELSEWHERE[name, dtype, quant, "model"]
    assert dict(Counter(run.elsewhere())) == pinned, run.summary()
    cpu = real_ep_checks.on_cpu(package, str(tmp_path / "cpu"))
    model = os.path.join(cpu, "model.onnx")
    ir.save(exact_int4(ir.load(os.path.join(package, "model.onnx"))), model,
            external_data="model.onnx.data")
    assert run.tokens == genai_generate(cpu, prompts, 8)


def _saved(builds, name, dtype, quant, folder) -> str:
    builds.get(name, "webgpu", dtype, quant).save(folder)
    return folder
