"""onnxruntime-genai runs of one package, each in a fresh process (see tools/bench.py).

``run_one``: prefill latency and decode speed. ``load_one``: Model load time and
the process's peak RSS after loading and after a prefill. ``graph_stats``: node
counts of model.onnx.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import time

_LAYER_RE = re.compile(r"layers[._/](\d+)[./_]")


def graph_stats(folder: str, num_layers: int) -> dict:
    """Node counts of model.onnx: total, per decoder layer, and outside the layers."""
    import onnx

    model = onnx.load(os.path.join(folder, "model.onnx"), load_external_data=False)
    per_layer: dict[int, int] = {}
    per_layer_ops: dict[str, int] = {}
    outside = 0
    for node in model.graph.node:
        text = node.name + " " + " ".join(node.output)
        match = _LAYER_RE.search(text)
        layer = int(match.group(1)) if match else -1
        if 0 <= layer < num_layers:
            per_layer[layer] = per_layer.get(layer, 0) + 1
            if layer == 1:
                per_layer_ops[node.op_type] = per_layer_ops.get(node.op_type, 0) + 1
        else:  # embedding, mask, final norm, lm_head (some name it layers.N)
            outside += 1
    total = len(model.graph.node)
    attributed = len(per_layer) == num_layers
    return {
        "nodes": total,
        # Per layer from names when every layer is recognisable, else the average.
        "nodes_per_layer": (statistics.median(per_layer.values()) if attributed
                            else round(total / num_layers, 1)),
        "nodes_outside_layers": outside if attributed else None,
        "layer_1_ops": dict(sorted(per_layer_ops.items())),
    }


def open_model(folder: str, threads: int | None = None):
    """og.Model of ``folder``; ``threads`` overrides the decoder session's intra-op
    thread count (genai_config.json left as built), so runtimes compare at equal threads."""
    import onnxruntime_genai as og

    if not threads:
        return og.Model(folder)
    config = og.Config(folder)
    config.overlay(json.dumps({"model": {"decoder": {"session_options": {
        "intra_op_num_threads": threads}}}}))
    return og.Model(config)


def run_one(folder: str, prompt_tokens: int, decode_tokens: int, repeat: int,
            threads: int | None = None) -> dict:
    """Times prefill and decode of one package with onnxruntime-genai (in this process)."""
    import numpy as np
    import onnxruntime_genai as og

    start = time.perf_counter()
    model = open_model(folder, threads)
    load_s = time.perf_counter() - start
    rng = np.random.default_rng(0)
    # Ids inside the tokenizer's vocabulary (600) and past the special tokens.
    prompt = rng.integers(10, 500, size=prompt_tokens).astype(np.int32)
    prefill, decode, generated = [], [], []
    for attempt in range(repeat + 1):  # the first one warms up
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=prompt_tokens + decode_tokens,
                                  min_length=prompt_tokens + decode_tokens, do_sample=False)
        generator = og.Generator(model, params)
        t0 = time.perf_counter()
        generator.append_tokens(prompt)
        t1 = time.perf_counter()
        steps = 0
        while steps < decode_tokens and not generator.is_done():
            generator.generate_next_token()
            steps += 1
        t2 = time.perf_counter()
        if attempt:
            prefill.append(t1 - t0)
            decode.append(steps / (t2 - t1))
            generated.append(steps)
        del generator
    return {"load_s": round(load_s, 3), "prefill_ms": round(1000 * statistics.median(prefill), 2),
            "decode_tok_s": round(statistics.median(decode), 2), "decode_steps": min(generated),
            "prefill_ms_all": [round(1000 * p, 2) for p in prefill],
            "decode_tok_s_all": [round(d, 2) for d in decode]}


def _vm(field: bytes) -> int:
    """A VmRSS / VmHWM line of this process, in bytes."""
    with open("/proc/self/status", "rb") as f:
        for line in f:
            if line.startswith(field):
                return int(line.split()[1]) * 1024
    return 0


def load_one(folder: str, prompt_tokens: int) -> dict:
    """Model load time, and this (fresh) process's peak RSS after loading and after
    one prefill of ``prompt_tokens`` tokens (VmHWM: every page the process held at
    once, weights mapped from the package included)."""
    import numpy as np
    import onnxruntime_genai as og

    start, cpu = time.perf_counter(), time.process_time()
    model = og.Model(folder)
    load_s, load_cpu_s = time.perf_counter() - start, time.process_time() - cpu
    after_load = _vm(b"VmHWM:")
    prompt = np.random.default_rng(0).integers(10, 500, size=prompt_tokens).astype(np.int32)
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=prompt_tokens + 1, do_sample=False)
    generator = og.Generator(model, params)
    start, cpu = time.perf_counter(), time.process_time()
    generator.append_tokens(prompt)
    prefill_s, prefill_cpu_s = time.perf_counter() - start, time.process_time() - cpu
    return {"load_s": round(load_s, 3), "load_cpu_s": round(load_cpu_s, 3),
            "peak_rss_after_load": after_load, "peak_rss_after_prefill": _vm(b"VmHWM:"),
            "prefill_s": round(prefill_s, 3), "prefill_cpu_s": round(prefill_cpu_s, 3)}
