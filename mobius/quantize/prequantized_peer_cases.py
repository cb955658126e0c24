"""The peer's side of prequantized_peer_test (the reference_cases rule runs it at build time,
//rules:references.bzl): each GPTQ / AWQ checkpoint and the package ORT GenAI's model
builder makes of it (the builder imports torch and transformers).
"""

from __future__ import annotations

import os
import runpy
import shutil
import sys
import tempfile

from testing.prequantized_checkpoints import awq_config, gptq_config

PREQUANTIZED = {
    "gptq-int4-sym-act-order-g32": gptq_config(4, 32, sym=True, desc_act=True),
    "gptq-int8-asym-g32": gptq_config(8, 32, sym=False),
    "awq-int4-g32": awq_config(32),
}
CASES = sorted(PREQUANTIZED)


def write_case(name: str, folder: str) -> None:
    """ckpt/ (the packed checkpoint) and peer/ (the builder's package)."""
    from testing.prequantized_checkpoints import write_prequantized

    scratch = tempfile.mkdtemp(prefix="peer-")
    try:
        checkpoint = write_prequantized(os.path.join(folder, "ckpt"), os.path.join(scratch, "ref"),
                                        PREQUANTIZED[name], intermediate_size=160,
                                        attention_bias=True, mlp_bias=True)
        _peer_build(checkpoint, os.path.join(folder, "peer"), os.path.join(scratch, "cache"))
    finally:
        shutil.rmtree(scratch)


def _peer_build(folder: str, out: str, cache: str) -> None:
    """``python -m onnxruntime_genai.models.builder -p int4 -e cpu`` at accuracy level 1,
    lm_head kept float, run in this process (runpy; HF_HOME under ``cache``: nothing under ~)."""
    argv = ["builder", "-i", folder, "-o", out, "-p", "int4", "-e", "cpu", "-c", cache,
            "--extra_options", "accuracy_level=1", "nodes_to_exclude=/lm_head/MatMul"]
    saved_argv, saved_home = sys.argv, os.environ.get("HF_HOME")
    os.environ["HF_HOME"] = os.path.join(cache, "hf")
    sys.argv = argv
    try:
        runpy.run_module("onnxruntime_genai.models.builder", run_name="__main__", alter_sys=True)
    finally:
        sys.argv = saved_argv
        if saved_home is None:
            os.environ.pop("HF_HOME")
        else:
            os.environ["HF_HOME"] = saved_home
    assert os.path.exists(os.path.join(out, "model.onnx"))
