"""Packages built by Bazel (mobius_package targets, //rules:zoo.bzl) are complete and run."""

from __future__ import annotations

import json
import os

import onnx
import onnxruntime_genai as og
import pytest

ZOO = os.path.dirname(os.path.abspath(__file__))


@pytest.mark.parametrize("name, provider", [("tiny-llama-cpu-f32", "cpu"),
                                            ("tiny-qwen3-cuda-f16", "cuda")])
def test_package_folder_is_complete(name, provider):
    folder = os.path.join(ZOO, name)
    files = set(os.listdir(folder))
    assert {"model.onnx", "model.onnx.data", "genai_config.json", "tokenizer.json"} <= files
    with open(os.path.join(folder, "genai_config.json")) as f:
        options = json.load(f)["model"]["decoder"]["session_options"]["provider_options"]
    assert [list(o) for o in options] == ([] if provider == "cpu" else [[provider]])
    model = onnx.load(os.path.join(folder, "model.onnx"), load_external_data=False)
    assert "logits" in [o.name for o in model.graph.output] and len(model.graph.node) > 10


def test_cpu_package_generates_with_genai():
    model = og.Model(os.path.join(ZOO, "tiny-llama-cpu-f32"))
    params = og.GeneratorParams(model)
    params.set_search_options(max_length=8, do_sample=False)
    generator = og.Generator(model, params)
    generator.append_tokens([[1, 5, 9]])
    while not generator.is_done():
        generator.generate_next_token()
    tokens = list(generator.get_sequence(0))
    assert tokens[:3] == [1, 5, 9] and len(tokens) > 3
