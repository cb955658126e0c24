"""Concurrent builds for different EPs give exactly the graphs of sequential builds.

The target EP and dtype live in contextvars (mobius/context.py), so builds in
threads or asyncio tasks must not see each other's settings. Each graph is
compared as its serialized ModelProto with the initializer *payloads* removed
(names, dtypes, shapes, nodes, attributes, functions, opsets all kept), plus
the genai_config.
"""

from __future__ import annotations

import asyncio
import threading
from concurrent.futures import ThreadPoolExecutor

import onnx_ir as ir
import pytest

import mobius

#: (EP, dtype) pairs whose graphs differ from each other in EP-specific ways.
TARGETS = [("cpu", "f32"), ("cuda", "f16"), ("dml", "f16"), ("webgpu", "f32"),
           ("default", "bf16"), ("trt-rtx", "f16")]


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from mobius.tiny.checkpoint import make_tiny_checkpoint

    return make_tiny_checkpoint("tiny-qwen3", str(tmp_path_factory.mktemp("ckpt") / "tiny-qwen3"))


def fingerprint(package) -> tuple[bytes, dict]:
    proto = ir.serde.serialize_model(package.model)
    for tensor in proto.graph.initializer:
        for field in ("raw_data", "float_data", "int32_data", "int64_data", "double_data",
                      "uint64_data", "string_data"):
            tensor.ClearField(field)
    return proto.SerializeToString(deterministic=True), package.genai_config


def build(checkpoint, ep, dtype):
    return fingerprint(mobius.build(checkpoint, execution_provider=ep, dtype=dtype))


@pytest.fixture(scope="module")
def sequential(checkpoint):
    return {(ep, dtype): build(checkpoint, ep, dtype) for ep, dtype in TARGETS}


def test_sequential_builds_are_deterministic(checkpoint, sequential):
    for ep, dtype in TARGETS[:2]:
        assert build(checkpoint, ep, dtype) == sequential[ep, dtype]


def test_the_targets_really_differ(sequential):
    graphs = [graph for graph, _ in sequential.values()]
    assert len(set(graphs)) == len(graphs)


def describe_mismatch(ep, dtype, got, want) -> str:
    return f"{ep}/{dtype}: concurrent build differs from the sequential one " + (
        "(graph)" if got[0] != want[0] else "(genai_config)")


@pytest.mark.parametrize("round_", range(3))
def test_threads(checkpoint, sequential, round_):
    """All targets at once, each in its own thread, started together."""
    start = threading.Barrier(len(TARGETS))

    def job(target):
        start.wait(timeout=30)
        return build(checkpoint, *target)

    with ThreadPoolExecutor(max_workers=len(TARGETS)) as pool:
        results = list(pool.map(job, TARGETS))
    for (ep, dtype), got in zip(TARGETS, results):
        want = sequential[ep, dtype]
        assert got == want, describe_mismatch(ep, dtype, got, want)


def test_two_eps_in_two_threads(checkpoint, sequential):
    results = {}

    def job(ep, dtype):
        for _ in range(3):  # several interleavings
            results.setdefault((ep, dtype), []).append(build(checkpoint, ep, dtype))

    threads = [threading.Thread(target=job, args=t) for t in [("cpu", "f32"), ("cuda", "f16")]]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for target, runs in results.items():
        assert all(run == sequential[target] for run in runs), target


def test_asyncio_gather(checkpoint, sequential):
    async def main():
        return await asyncio.gather(*(asyncio.to_thread(build, checkpoint, ep, dtype)
                                      for ep, dtype in TARGETS))

    results = asyncio.run(main())
    for (ep, dtype), got in zip(TARGETS, results):
        want = sequential[ep, dtype]
        assert got == want, describe_mismatch(ep, dtype, got, want)


def test_concurrent_builds_leave_the_callers_context_alone(checkpoint):
    from mobius.context import build_context, ep_capabilities, get_build_dtype

    async def main():
        with build_context(mobius.get_ep("mlx"), ir.DataType.BFLOAT16):
            await asyncio.gather(*(asyncio.to_thread(build, checkpoint, ep, dtype)
                                   for ep, dtype in TARGETS[:3]))
            return ep_capabilities().name, get_build_dtype()

    assert asyncio.run(main()) == ("mlx", ir.DataType.BFLOAT16)
    assert ep_capabilities().name == "default"
