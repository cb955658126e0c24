"""L6: packages built for --ep qnn, run on the real QNN EP here (the HTP simulated on x86-64).

For a cohort (dense decoder f32 / f16, sliding-window decoder, MoE, hybrid), the tiny
preset's decoder built for qnn runs on onnxruntime-qnn's HTP backend
(testing/qnn_backend.py, a plugin library on the pinned onnxruntime, all in one worker):
the ops that ran outside QNN are exactly the pinned ones (ELSEWHERE, each op with its
reason in WHY); the outputs match onnxruntime's CPU EP on the same model; and greedy
tokens on QNN equal the CPU EP's. Tokens go through onnxruntime (testing/static_decoder.py):
onnxruntime-genai 0.18 drives no float static decoder (its QNN sliding-window cache takes
uint8 KV only; docs/eps.md, "QNN").
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import onnx_ir as ir
import onnxruntime as ort
import pytest

import mobius
from testing import real_ep_checks, static_decoder
from testing.qnn_backend import BACKEND
from testing.real_backend import Job

DTYPES = {"f32": ir.DataType.FLOAT, "f16": ir.DataType.FLOAT16}
#: the HTP computes every float graph in fp16 (enable_htp_fp16_precision): an f32 package
#: is held to the f16 bound (8 spacings at the tensor's largest magnitude; measured <= 7.5,
#: lfm2's conv state), as an f16 package is
COMPUTED = "f16"
#: (family, dtype): dense decoder, sliding-window decoder, MoE, hybrid (short conv + attention)
COHORT = [("tiny-llama", "f32"), ("tiny-llama", "f16"), ("tiny-mistral", "f16"),
          ("tiny-qwen3-moe", "f32"), ("tiny-lfm2", "f32")]
#: greedy tokens through onnxruntime, QNN against the CPU EP
TOKENS = [("tiny-llama", "f32"), ("tiny-llama", "f16")]

_ROUTING = "the MoE's token routing: data-dependent shapes (NonZero) the HTP cannot compile"
#: op run outside QNN -> why (measured with onnxruntime-qnn 2.7.0, HTP simulator)
WHY = {
    "NonZero": _ROUTING,
    **{op: _ROUTING + ", and the expert compute on the rows it picks (after ORT's fusions)"
       for op in ("GatherND", "MatMul", "Mul", "QuickGelu", "ScatterND", "Transpose",
                  "Unsqueeze")},
}
#: (family, dtype) -> {op: nodes run outside QNN}; like a golden, update on purpose
#: (every op needs its entry in WHY). The rest of each graph is one QNN node per subgraph.
ELSEWHERE: dict[tuple, dict[str, int]] = {
    ("tiny-qwen3-moe", "f32"): {"GatherND": 12, "MatMul": 18, "Mul": 12, "NonZero": 6,
                                "QuickGelu": 6, "ScatterND": 6, "Transpose": 6, "Unsqueeze": 6},
}


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    """(tiny model, dtype) -> its qnn decoder's model.onnx, built once for the module."""
    built = {}

    def get(name, dtype):
        if (name, dtype) not in built:
            folder = str(tmp_path_factory.mktemp(f"{name}-{dtype}"))
            mobius.build(name, execution_provider=BACKEND.ep, dtype=dtype).save(folder)
            built[name, dtype] = f"{folder}/model.onnx"
        return built[name, dtype]

    return get


@pytest.fixture(scope="module")
def runs(packages):
    """Every cohort decoder's run on QNN, one worker for all, and its CPU-EP reference."""
    jobs, references = {}, {}
    for name, dtype in COHORT:
        path = packages(name, dtype)
        cpu = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
        feeds = real_ep_checks.feeds(cpu.get_inputs())
        jobs[name, dtype] = Job(path, feeds, DTYPES[dtype], False)
        references[name, dtype] = dict(zip([o.name for o in cpu.get_outputs()],
                                           cpu.run(None, feeds)))
    done = dict(zip(jobs, BACKEND.run_sessions(list(jobs.values()))))
    return {key: (done[key], references[key]) for key in jobs}


@pytest.mark.parametrize("name,dtype", COHORT)
def test_runs_on_qnn_like_the_cpu_ep(runs, name, dtype):
    run, expected = runs[name, dtype]
    assert run.error is None, run.error
    assert dict(Counter(run.elsewhere())) == ELSEWHERE.get((name, dtype), {}), run.summary()
    assert run.on_ep() > 0, run.summary()
    for output_name, reference in expected.items():
        got = run.outputs[output_name].astype(np.float32)
        diff = float(np.abs(got - reference.astype(np.float32)).max())
        assert diff <= real_ep_checks.tolerance(COMPUTED, reference), (
            f"{name} {dtype} {output_name}: {diff:.3g} from the CPU EP")


def test_every_op_kept_off_qnn_has_its_reason():
    ops = {op for pinned in ELSEWHERE.values() for op in pinned}
    assert sorted(ops - set(WHY)) == []


@pytest.mark.parametrize("name,dtype", TOKENS)
def test_greedy_tokens_equal_the_cpu_ep(packages, name, dtype):
    path = packages(name, dtype)
    prompt = [5, 17, 42, 9, 33, 7, 8, 100, 200, 300, 11]  # two chunks: 3 (left-padded) + 8
    run = BACKEND.static_greedy(path, prompt, 8, DTYPES[dtype])
    assert dict(Counter(run.elsewhere())) == ELSEWHERE.get((name, dtype), {}), run.summary()
    cpu = ort.InferenceSession(path, providers=["CPUExecutionProvider"])
    names = [o.name for o in cpu.get_outputs()]
    expected = static_decoder.greedy(lambda feeds: dict(zip(names, cpu.run(None, feeds))),
                                     cpu.get_inputs(), prompt, 8)
    assert run.tokens == expected
