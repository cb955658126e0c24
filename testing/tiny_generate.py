"""Build action behind the ``tiny_checkpoint`` rule (//rules:tiny.bzl): writes one tiny preset.

    python3 -m testing.tiny_generate tiny-llama OUT_DIR
    python3 -m testing.tiny_generate @ARGS_FILE          # the same, one argument a line
    python3 -m testing.tiny_generate --persistent_worker # Bazel's worker (testing/bazel_worker.py)

As a Bazel persistent worker the imports (onnx_ir, sympy, the model registry: ~0.7 s)
are paid once per worker process, not once per checkpoint. Each request writes only
its output directory and its random tensors come from a generator seeded per
checkpoint, so a worker's outputs are byte-identical to one-shot runs.
"""

from __future__ import annotations

import os
import sys

from mobius.errors import MobiusError
from mobius.tiny.checkpoint import preset_config, write_tiny_checkpoint
from testing import bazel_worker

USAGE = "usage: python3 -m testing.tiny_generate PRESET OUT_DIR"


def generate(args: list[str]) -> tuple[int, str]:
    """Writes preset ``args[0]`` into folder ``args[1]``: (exit code, error message)."""
    if len(args) != 2:
        return 2, USAGE
    name, out = args
    try:
        preset_config(name)  # an unknown name writes nothing
        os.makedirs(out, exist_ok=True)
        write_tiny_checkpoint(name, out)
    except MobiusError as e:
        return 1, f"mobius: error: {e}"
    return 0, ""


if __name__ == "__main__":
    sys.exit(bazel_worker.main(generate, sys.argv[1:]))
