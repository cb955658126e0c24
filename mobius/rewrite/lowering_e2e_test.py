"""End to end: the lowering rules on real decoders of every tiny family.

webgpu (no Shape, no int64 I/O, no If) and dml (no If) packages must satisfy
their EP's constraints *and* compute what the default-EP package computes,
both run on onnxruntime's CPU EP: a batch-2 unpadded prefill of 10 tokens then
3 decode steps fed the same tokens on both sides. (Left-padded decode differs
for GQA with do_rotary=1 by a known kernel limitation, hence pad=0.)

Tolerances. f32: 1e-4 (observed ~1e-6: the graphs differ only in kernel
choice and summation order). f16: both packages store activations in f16 and
the GQA and Attention kernels round intermediates at different points, so
logits can differ by a few half-precision ulps of their magnitude; we allow
``4 * ulp_f16(max |logit|)`` (~8e-3 for the tiny models' |logits| < 4;
observed <= 2e-3, i.e. 1 ulp). A real lowering bug (a wrong dim, a dropped
mask) moves logits by O(0.1..1).
"""

from __future__ import annotations

import dataclasses
import warnings

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest

import mobius
from mobius.ep.registry import get_ep
from testing import parity

#: this test's Bazel target, read by //tools:rewrite_rules
#: (40 tiny builds (4 families x default/webgpu/dml/no-GQA x f32/f16) + decoding)
TEST_TARGET = {"size": "medium",
               "tiny": ["tiny-llama", "tiny-mistral", "tiny-qwen2", "tiny-qwen3"]}

FAMILIES = ("tiny-llama", "tiny-mistral", "tiny-qwen2", "tiny-qwen3")
DTYPES = ("f32", "f16")
NP_DTYPES = {"f32": np.float32, "f16": np.float16}
_NP = {"tensor(int64)": np.int64, "tensor(int32)": np.int32}

#: webgpu's constraints without its GQA kernel: keeps the generic Attention + mask subgraph
WEBGPU_NO_GQA = dataclasses.replace(get_ep("webgpu"), name="webgpu-no-gqa", gqa_dtypes=frozenset(),
                                    qkv_pack_dtypes=frozenset())

_CACHE: dict = {}


@pytest.fixture(scope="module")
def packages(tmp_path_factory):
    def get(family, ep, dtype):
        key = (family, ep if isinstance(ep, str) else ep.name, dtype)
        if key not in _CACHE:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                package = mobius.build(family, execution_provider=ep, dtype=dtype)
            folder = tmp_path_factory.mktemp("_".join(key))
            path = package.save(str(folder), overwrite=True)
            _CACHE[key] = (package, f"{path}/model.onnx")
        return _CACHE[key]

    return get


def _all_nodes(model: ir.Model):
    yield from model.graph.all_nodes()
    for function in model.functions.values():
        yield from function.graph.all_nodes()


def _histogram(path: str) -> dict:
    proto = onnx.load(path, load_external_data=False)
    counts: dict = {}
    graphs = [proto.graph] + [f for f in proto.functions]

    def walk(nodes):
        for node in nodes:
            counts[node.op_type] = counts.get(node.op_type, 0) + 1
            for a in node.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    walk(a.g.node)
                for g in a.graphs:
                    walk(g.node)

    for g in graphs:
        walk(g.node)
    return counts


def _io_int64(path: str) -> list[str]:
    proto = onnx.load(path, load_external_data=False)
    return [v.name for v in list(proto.graph.input) + list(proto.graph.output)
            if v.type.tensor_type.elem_type == onnx.TensorProto.INT64]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("family", FAMILIES)
def test_webgpu_package_meets_constraints(packages, family, dtype):
    package, path = packages(family, "webgpu", dtype)
    counts = _histogram(path)
    assert counts.get("Shape", 0) == 0
    assert counts.get("If", 0) == 0
    assert _io_int64(path) == []
    assert counts.get("GroupQueryAttention") == package.config.num_hidden_layers  # the fused graph
    proto = onnx.load(path, load_external_data=False)
    assert {i.name: i.type.tensor_type.elem_type for i in proto.graph.input
            if i.name in ("input_ids", "attention_mask", "position_ids")} == {
        "input_ids": onnx.TensorProto.INT32, "attention_mask": onnx.TensorProto.INT32,
        "position_ids": onnx.TensorProto.INT32}


@pytest.mark.parametrize("family", FAMILIES)
def test_generic_graph_with_webgpu_constraints_meets_them(packages, family):
    _, path = packages(family, WEBGPU_NO_GQA, "f32")
    counts = _histogram(path)
    assert counts.get("Shape", 0) == 0 and counts.get("If", 0) == 0 and _io_int64(path) == []
    assert counts.get("Attention") and counts.get("Range")  # the generic mask subgraph was there


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("family", FAMILIES)
def test_dml_package_has_no_if(packages, family, dtype):
    _, path = packages(family, "dml", dtype)
    assert _histogram(path).get("If", 0) == 0


class _Typed:
    """Feeds int64 arrays as whatever integer type the session declares (int32 on webgpu)."""

    def __init__(self, path: str):
        options = ort.SessionOptions()
        options.intra_op_num_threads = 2
        self.session = ort.InferenceSession(path, options, providers=["CPUExecutionProvider"])
        self.types = {i.name: i.type for i in self.session.get_inputs()}

    def get_inputs(self):
        return self.session.get_inputs()

    def get_outputs(self):
        return self.session.get_outputs()

    def run(self, names, feeds):
        feeds = {k: v.astype(_NP[self.types[k]]) if self.types[k] in _NP else v
                 for k, v in feeds.items()}
        return self.session.run(names, feeds)


def _decode(session, config, input_ids, mask, tokens, np_dtype):
    """Prefill + one decode step per token in ``tokens``; logits per step (float32)."""
    kv, hd, layers = config.num_key_value_heads, config.head_dim, config.num_hidden_layers
    logits, past = parity.run_onnx_decoder(session, input_ids, mask, None, layers, kv, hd, np_dtype)
    steps = [logits.astype(np.float32)]
    for token in tokens:
        mask = np.concatenate([mask, np.ones((mask.shape[0], 1), np.int64)], axis=1)
        logits, past = parity.run_onnx_decoder(session, token, mask, past, layers, kv, hd, np_dtype)
        steps.append(logits.astype(np.float32))
    return steps


def _tolerance(dtype: str, reference_steps) -> float:
    if dtype == "f32":
        return 1e-4
    peak = max(float(np.abs(s).max()) for s in reference_steps)
    return 4 * float(np.spacing(np.float16(peak)))


def _compare_to_default(packages, family, ep, dtype):
    ref_package, ref_path = packages(family, "default", dtype)
    _, path = packages(family, ep, dtype)
    config = ref_package.config
    np_dtype = NP_DTYPES[dtype]
    input_ids, mask = parity.make_batch(config.vocab_size, prompt_len=10, pad=0)
    ref_steps, tokens = parity.onnx_greedy_logits(_Typed(ref_path), config, input_ids, mask, 3,
                                                  np_dtype)
    steps = _decode(_Typed(path), config, input_ids, mask, tokens, np_dtype)
    worst = max(float(np.abs(a - b).max()) for a, b in zip(steps, ref_steps))
    tol = _tolerance(dtype, ref_steps)
    assert worst <= tol, f"{family} {ep} {dtype}: max |logit diff| {worst:.3g} > {tol:.3g}"
    return worst


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("family", FAMILIES)
def test_webgpu_package_matches_default_on_cpu(packages, family, dtype):
    _compare_to_default(packages, family, "webgpu", dtype)


@pytest.mark.parametrize("family", FAMILIES)
def test_generic_graph_with_webgpu_constraints_matches_default(packages, family):
    _compare_to_default(packages, family, WEBGPU_NO_GQA, "f32")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("family", FAMILIES)
def test_dml_package_matches_default_on_cpu(packages, family, dtype):
    _compare_to_default(packages, family, "dml", dtype)
