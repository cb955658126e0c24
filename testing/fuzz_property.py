"""The property every fuzzed checkpoint must satisfy (issue #8).

Either the build succeeds and the package loads in onnxruntime and matches
the float32 transformers reference, or it fails with exactly one
``mobius: error:`` line that names the offending field, tensor or file, a
non-zero exit, no output folder, and the checkpoint unchanged.
"""

from __future__ import annotations

import hashlib
import os

from testing.fork_server import ForkServer

#: prompt 10 + 3 left pad + 3 decode steps: a package needs this many positions to be run
PARITY_POSITIONS = 16
PARITY_TOLERANCE = 2e-3


def fingerprint(folder: str) -> dict[str, str]:
    """Every file (links as links) under ``folder`` with its content hash."""
    out = {}
    for root, dirs, files in os.walk(folder):
        for name in files + [d for d in dirs if os.path.islink(os.path.join(root, d))]:
            path = os.path.join(root, name)
            if os.path.islink(path):
                out[os.path.relpath(path, folder)] = "-> " + os.readlink(path)
                continue
            with open(path, "rb") as f:
                out[os.path.relpath(path, folder)] = hashlib.sha256(f.read()).hexdigest()
    return out


def check_build(server: ForkServer, checkpoint: str, out: str, names: tuple[str, ...],
                reference_checkpoint: str) -> str:
    """Builds ``checkpoint`` into ``out`` and asserts the property; returns "built" or the error.

    ``names``: fragments one of which an error line must contain (the mutated
    field, the file, ...). ``reference_checkpoint``: the unmutated original,
    the reference when transformers itself refuses the mutated config.
    """
    before = fingerprint(checkpoint)
    # every prompt position's logits: the parity check below compares them all
    result = server.run(["build", "-q", "--prefill-logits", "all", "--model", checkpoint, out])
    assert fingerprint(checkpoint) == before, "the checkpoint was changed"
    if result.code == 0:
        _check_package(checkpoint, out, reference_checkpoint)
        return "built"
    lines = result.output.strip().splitlines()
    assert result.code == 1 and len(lines) == 1, f"exit {result.code}:\n{result.output[-3000:]}"
    assert lines[0].startswith("mobius: error: "), lines[0]
    assert any(n in lines[0] for n in names), (names, lines[0])
    parent = os.path.dirname(out)
    assert not os.path.exists(out) and not [n for n in os.listdir(parent) if n.startswith(".")]
    return lines[0]


def _check_package(checkpoint: str, out: str, reference_checkpoint: str) -> None:
    from mobius.config.architecture import load_config
    from mobius.models.registry import family_for
    from testing.hf_checkpoints import load_hf_model
    from testing.model_runs import BuiltPackage, f32_parity, ort_session

    raw, generation = load_config(checkpoint)
    config = family_for(raw).make_config(raw, generation)
    session = ort_session(os.path.join(out, "model.onnx"))  # loads in onnxruntime
    if config.max_position_embeddings < PARITY_POSITIONS:
        return  # a context too short for the parity prompt: loading is what can be checked
    try:
        reference = load_hf_model(checkpoint)
    except Exception:  # transformers refuses the value: it must not have changed the numbers
        reference = load_hf_model(reference_checkpoint)
    built = BuiltPackage(path=out, config=config, dtype="f32")
    diff = f32_parity(built, reference, session=session).max_abs_diff
    assert diff <= PARITY_TOLERANCE, f"built, but logits differ from transformers by {diff}"
