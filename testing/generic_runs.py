"""The generic graph's runs that every EP's L3 parity target compares with, made once.

Each non-default EP's parity target (ep/parity_suite.py) runs its graph against the
default EP's graph of the same family and dtype on the same batch (testing/ep_parity.py):
the generic side -- session, prefill, greedy decode steps, the tokens it picks -- is the
same computation in every EP's target. The ``ep_generic_runs`` actions (rules/ep_suite.bzl,
testing/write_generic_runs.py) make it once per (family, dtype, backend, pad) from the
default EP's stored builds; the targets load it here. Each stored run names the SHA-256
of the graph it ran, checked on load, so a run can only stand for that exact graph.
Outside Bazel there is no such folder and ep_parity runs the generic graph in-process.

Layout: ``<root>/<family>/<dtype>/<backend>-pad<pad>.pickle`` holding (sha256, Run,
tokens), or ``...pickle.error``: the traceback of a run that raised, raised again where a
test asks for it. Every run is ep_parity.STEPS decode steps long; a test wanting fewer
takes its prefix (ep_parity.truncate).
"""

from __future__ import annotations

import hashlib
import os
import pickle

from testing import ep_parity, ep_suite as s

#: the pads ep/parity_suite.py runs on the CPU EP (unpadded, left-padded) and on onnx.reference
ORT_PADS = (0, 3)
REFERENCE_PAD = 3


def cases() -> dict[tuple[str, str], set[tuple[str, int]]]:
    """(family, dtype) -> {(backend, pad)}: every generic run the parity targets of the
    EPs other than "default" ask for (ep/parity_suite.py's test_unpadded,
    test_left_padded and test_function_bodies_on_onnx_reference)."""
    out: dict[tuple[str, str], set[tuple[str, int]]] = {}
    for ep in s.EP_DTYPES:
        if ep == "default":  # its parity target checks the generic graph against itself
            continue
        for family, dtype in s.matrix(ep):
            runs = out.setdefault((family, dtype), set())
            if ep_parity.cpu_runnable(ep, dtype):
                runs.update(("ort", pad) for pad in ORT_PADS)
            else:
                runs.add(("reference", REFERENCE_PAD))
    return out


def path(root: str, family: str, dtype: str, backend: str, pad: int) -> str:
    return os.path.join(root, family, dtype, f"{backend}-pad{pad}.pickle")


def sha256(model_bytes: bytes) -> str:
    return hashlib.sha256(model_bytes).hexdigest()


def write(file: str, model_bytes: bytes, config, dtype: str, backend: str, pad: int) -> None:
    """Runs the generic graph as ep_parity.ep_vs_generic would, and stores the run."""
    os.makedirs(os.path.dirname(file), exist_ok=True)
    reference, tokens = ep_parity.generic_run(model_bytes, config, dtype, pad=pad,
                                              backend=backend)
    with open(file, "wb") as f:
        pickle.dump((sha256(model_bytes), reference, tokens), f,
                    protocol=pickle.HIGHEST_PROTOCOL)


def roots() -> list[str] | None:
    """The actions' output folders in this test's runfiles (ep/generic_runs/<shard>), else
    None (outside Bazel, or a target without them in its data)."""
    top = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                       "ep", "generic_runs")
    if not os.path.isdir(top):
        return None
    return [os.path.join(top, shard) for shard in sorted(os.listdir(top))]


def load(family: str, dtype: str, backend: str, pad: int, model_bytes: bytes):
    """(Run, tokens) of the stored run of this generic graph, or None where there is no
    store (ep_parity then runs it); a store without this case, or one made from other
    bytes, is an error."""
    folders = roots()
    if folders is None:
        return None
    for root in folders:
        file = path(root, family, dtype, backend, pad)
        if os.path.exists(file + ".error"):
            with open(file + ".error") as f:
                raise RuntimeError(f"the generic run failed in its action:\n{f.read()}")
        if os.path.exists(file):
            with open(file, "rb") as f:
                digest, reference, tokens = pickle.load(f)
            if digest != sha256(model_bytes):
                raise RuntimeError(f"{file} was run on another graph than the default "
                                   f"{family}/{dtype} build this test loaded")
            return reference, tokens
    raise KeyError(f"no stored generic run {family}/{dtype}/{backend}/pad {pad}: add the case "
                   "to testing/generic_runs.cases")
