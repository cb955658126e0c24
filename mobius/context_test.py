"""build_context / ep_capabilities / get_build_dtype: contextvars semantics."""

from __future__ import annotations

import asyncio
import threading

import onnx_ir as ir
import pytest

from mobius.context import build_context, ep_capabilities, get_build_dtype
from mobius.ep.registry import get_ep

F32, F16, BF16 = ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16


def state():
    return ep_capabilities().name, get_build_dtype()


def test_outside_any_context_default_ep_and_float():
    assert state() == ("default", F32)
    assert ep_capabilities() is get_ep("default")


def test_none_caps_means_default_ep():
    with build_context(None, F16):
        assert state() == ("default", F16)


def test_nesting_restores_each_level_on_exit():
    with build_context(get_ep("cuda"), F16):
        assert state() == ("cuda", F16)
        with build_context(get_ep("dml"), BF16):
            assert state() == ("dml", BF16)
            with build_context(None, F32):
                assert state() == ("default", F32)
            assert state() == ("dml", BF16)
        assert state() == ("cuda", F16)
    assert state() == ("default", F32)


def test_restored_when_the_body_raises():
    with pytest.raises(KeyError):
        with build_context(get_ep("cuda"), F16):
            with build_context(get_ep("webgpu"), BF16):
                raise KeyError("boom")
    assert state() == ("default", F32)


def test_inner_exception_caught_inside_restores_outer_level():
    with build_context(get_ep("cpu"), F32):
        try:
            with build_context(get_ep("mlx"), BF16):
                raise RuntimeError
        except RuntimeError:
            pass
        assert state() == ("cpu", F32)


def test_threads_are_independent():
    """Each thread sees only its own context, also while the others hold theirs."""
    targets = [("cuda", F16), ("dml", BF16), ("webgpu", F32), ("mlx", F16)]
    inside = threading.Barrier(len(targets) + 1)  # all threads inside their contexts at once
    release = threading.Event()
    seen, errors = {}, []

    def worker(name, dtype):
        try:
            assert state() == ("default", F32)  # a new thread starts from the defaults
            with build_context(get_ep(name), dtype):
                inside.wait(timeout=10)
                release.wait(timeout=10)
                seen[name] = state()
            seen[name + "/after"] = state()
        except Exception as e:  # noqa: BLE001 -- reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=t) for t in targets]
    with build_context(get_ep("trt-rtx"), BF16):  # the main thread's own context
        for t in threads:
            t.start()
        inside.wait(timeout=10)
        assert state() == ("trt-rtx", BF16)  # not any worker's
        release.set()
        for t in threads:
            t.join(timeout=10)
    assert not errors, errors
    for name, dtype in targets:
        assert seen[name] == (name, dtype)
        assert seen[name + "/after"] == ("default", F32)
    assert state() == ("default", F32)


def test_a_thread_does_not_inherit_the_parent_context():
    result = {}
    with build_context(get_ep("cuda"), F16):
        t = threading.Thread(target=lambda: result.update(state=state()))
        t.start()
        t.join()
    assert result["state"] == ("default", F32)


def test_asyncio_tasks_are_independent():
    async def task(name, dtype, gate: asyncio.Event, seen: dict):
        with build_context(get_ep(name), dtype):
            await gate.wait()  # every task is suspended inside its context here
            await asyncio.sleep(0)
            seen[name] = state()
        seen[name + "/after"] = state()

    async def main():
        gate, seen = asyncio.Event(), {}
        targets = [("cuda", F16), ("dml", BF16), ("cpu", F32)]
        tasks = [asyncio.create_task(task(n, d, gate, seen)) for n, d in targets]
        await asyncio.sleep(0)
        await asyncio.sleep(0)
        outer = state()  # the event loop's own context is untouched
        gate.set()
        await asyncio.gather(*tasks)
        return targets, seen, outer

    targets, seen, outer = asyncio.run(main())
    assert outer == ("default", F32)
    for name, dtype in targets:
        assert seen[name] == (name, dtype)
        assert seen[name + "/after"] == ("default", F32)


def test_asyncio_task_inherits_a_copy_of_the_creating_context():
    async def child():
        inherited = state()
        with build_context(get_ep("dml"), BF16):
            pass
        with build_context(get_ep("webgpu"), F32):
            return inherited, state()

    async def main():
        with build_context(get_ep("cuda"), F16):
            inherited, inner = await asyncio.create_task(child())
            return inherited, inner, state()

    inherited, inner, parent_after = asyncio.run(main())
    assert inherited == ("cuda", F16)  # created inside the parent's context
    assert inner == ("webgpu", F32)
    assert parent_after == ("cuda", F16)  # the child's changes never leak back


def test_to_thread_carries_the_context_and_keeps_it_local():
    async def main():
        with build_context(get_ep("mlx"), BF16):
            def body():
                before = state()
                with build_context(get_ep("cpu"), F32):
                    pass
                return before

            before = await asyncio.to_thread(body)
            return before, state()

    before, after = asyncio.run(main())
    assert before == ("mlx", BF16)  # asyncio.to_thread copies the context
    assert after == ("mlx", BF16)
