"""A family test's switch cases, written once: a checkpoint folder's f32 package against
transformers' recorded run, a copied checkpoint with its config.json edited, a reverted
switch that must move the logits, and a config refused before anything is written.

The cases modules (``<x>_cases.py``, testing/reference_cases.py) hold the checkpoints and
transformers' runs; these helpers read them through testing/checkpoint_runs.py.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from mobius.builder import build
from mobius.errors import ConfigError, WeightsError
from testing.checkpoint_runs import checkpoint, reference
from testing.ep_parity import uses_fused_rotary
from testing.model_runs import BuiltPackage, f32_parity

#: a reverted switch must move some logit by at least this much
CHANGED = 1e-3
#: what a structural switch's reverted config fails with: tensors missing, unread or resized
_STRUCTURAL = ("does not read", "missing", "has shape")


def f32_package_parity(folder, out, ep: str, ref, steps: int = 3):
    """(parity run, package): ``folder`` built for ``ep`` in f32 with every position's
    logits, run against transformers' recorded run ``ref`` (testing/model_runs.f32_parity)."""
    package = build(str(folder), execution_provider=ep, dtype="f32", prefill_logits="all")
    path = package.save(str(out), overwrite=True)
    return f32_parity(BuiltPackage(path, package.config, "f32"), ref, steps=steps), package


#: (checkpoint folder, its config.json, ep) -> (saved f32 package, config, fused RoPE)
_RECORDED_RUN_PACKAGES: dict[tuple[str, str, str], tuple[str, object, bool]] = {}


def f32_recorded_run_parity(folder, out, ep: str, case_run: str, ref):
    """f32_package_parity against transformers' ``case_run`` ("padded" or "unpadded") run: a
    left-padded run is compared over the prefill only where the package's
    GroupQueryAttention applies RoPE itself (ORT's kernel rotates a padded row's decode steps
    by cache slot, docs/eps.md). The package is built once per process for a checkpoint
    (folder and config.json) and EP, into the first call's ``out``: the padded and unpadded
    runs of a case compare the same package."""
    with open(os.path.join(str(folder), "config.json")) as f:
        key = (os.path.realpath(str(folder)), f.read(), ep)
    if key not in _RECORDED_RUN_PACKAGES:
        package = build(str(folder), execution_provider=ep, dtype="f32", prefill_logits="all")
        _RECORDED_RUN_PACKAGES[key] = (package.save(str(out), overwrite=True), package.config,
                                       uses_fused_rotary(package.model))
    path, config, fused_rope = _RECORDED_RUN_PACKAGES[key]
    steps = 0 if case_run == "padded" and fused_rope else 3
    return f32_parity(BuiltPackage(path, config, "f32"), ref, steps=steps)


def edit_config(folder, edits: dict) -> None:
    """Sets each key of ``edits`` in ``folder``'s config.json; a None value deletes the key."""
    path = os.path.join(str(folder), "config.json")
    with open(path) as f:
        raw = json.load(f)
    for key, value in edits.items():
        if value is None:
            raw.pop(key, None)
        else:
            raw[key] = value
    with open(path, "w") as f:
        json.dump(raw, f)


def copy_case(cases, case: str, folder) -> str:
    """A writable copy of reference case ``case``'s checkpoint at ``folder``."""
    shutil.copytree(checkpoint(cases, case), str(folder), copy_function=shutil.copyfile)
    return str(folder)


def assert_revert_moves_logits(cases, case: str, revert: dict, tmp_path, name: str) -> None:
    """``case``'s checkpoint with ``revert`` applied to its config.json, built for the default
    EP, must give logits other than transformers' run of the switch set, or be refused as
    a structural switch (tensors missing, unread or resized): proof the switch is read."""
    reverted = copy_case(cases, case, tmp_path / "reverted")
    edit_config(reverted, revert)
    try:
        run, _ = f32_package_parity(reverted, tmp_path / "pkg", "default", reference(cases, case))
    except WeightsError as error:
        assert any(part in str(error) for part in _STRUCTURAL), error
        return
    assert run.max_abs_diff > CHANGED, f"{name}: changes nothing ({run.max_abs_diff:.3g})"


def assert_rejected_up_front(tmp_path, config: dict, message: str,
                             files: dict | None = None) -> None:
    """A checkpoint folder holding only ``config`` (and ``files``: {name: JSON}) is refused
    with ``message`` (a ConfigError, before any weight is read) and leaves no output
    folder."""
    folder = tmp_path / "ckpt"
    folder.mkdir()
    for name, body in {"config.json": config, **(files or {})}.items():
        (folder / name).write_text(json.dumps(body))
    out = tmp_path / "out"
    with pytest.raises(ConfigError, match=message):
        build(str(folder), dtype="f32").save(str(out))
    assert not out.exists()
