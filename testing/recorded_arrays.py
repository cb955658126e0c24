"""A component test's recorded transformers run: the inputs it fed a transformers (or torch)
module and what came out, as named arrays in an .npz of the case's folder.

The cases module (//rules:references.bzl) ``save``s them at build time; the test
``load``s them and runs the mobius component on the same inputs, so it never imports torch.
Half-precision inputs are stored as their exact float32 values (.npz has no bfloat16).
"""

from __future__ import annotations

import os
from types import ModuleType

import numpy as np

from testing.reference_cases import case_dir


def save(folder: str, arrays: dict[str, np.ndarray], name: str = "arrays") -> None:
    """``folder``/``name``.npz holding ``arrays`` under their keys (dots and all)."""
    np.savez(os.path.join(folder, name + ".npz"), **{k: np.asarray(v) for k, v in arrays.items()})


def load(cases: ModuleType, case: str, name: str = "arrays") -> dict[str, np.ndarray]:
    """The arrays ``cases.write_case(case, ...)`` saved as ``name``."""
    with np.load(os.path.join(case_dir(cases, case), name + ".npz")) as data:
        return {key: data[key] for key in data.files}
