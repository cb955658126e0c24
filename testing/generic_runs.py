"""The generic graph's runs that every EP's L3 parity target compares with, made once.

Each non-default EP's parity target (ep/parity_suite.py) runs its graph against the
default EP's graph of the same family and dtype on the same batch (testing/ep_parity.py):
the generic side -- session, prefill, greedy decode steps, the tokens it picks -- is the
same computation in every EP's target. The ``ep_generic_runs`` actions (rules/ep_suite.bzl,
testing/write_generic_runs.py) make it once per (family, dtype, case) from the default
EP's stored builds; the targets load it here. A case is "<backend>-pad<pad>" (a decoder's
ep_parity.generic_run) or "vision-language" (ep_vlm_parity.generic_trace). Each stored run
names the SHA-256 of the graphs it ran, checked on load, so a run can only stand for
those exact graphs.
Outside Bazel there is no such folder and ep_parity runs the generic graph in-process.

Layout: ``<root>/<family>/<dtype>/<case>.pickle`` holding (sha256, run), or
``...pickle.error``: the traceback of a run that raised, raised again where a
test asks for it. Every run is ep_parity.STEPS decode steps long; a test wanting fewer
takes its prefix (ep_parity.truncate).
"""

from __future__ import annotations

import hashlib
import os
import pickle

from testing import ep_parity, ep_suite as s, ep_vlm_parity

#: the pads ep/parity_suite.py runs on the CPU EP (unpadded, left-padded) and on onnx.reference
ORT_PADS = (0, 3)
REFERENCE_PAD = 3
VISION_LANGUAGE = "vision-language"


def case(backend: str, pad: int) -> str:
    """A decoder comparison's case name."""
    return f"{backend}-pad{pad}"


def cases() -> dict[tuple[str, str], set[str]]:
    """(family, dtype) -> {case}: every generic run the parity targets of the EPs other
    than "default" ask for (ep/parity_suite.py's test_unpadded, test_left_padded,
    test_function_bodies_on_onnx_reference and test_vision_language)."""
    out: dict[tuple[str, str], set[str]] = {}
    for ep in s.EP_DTYPES:
        if ep == "default":  # its parity target checks the generic graph against itself
            continue
        for family, dtype in s.matrix(ep):
            runs = out.setdefault((family, dtype), set())
            if ep_parity.cpu_runnable(ep, dtype):
                runs.update(case("ort", pad) for pad in ORT_PADS)
            else:
                runs.add(case("reference", REFERENCE_PAD))
        cpu_dtypes = [d for d in s.EP_DTYPES[ep] if ep_parity.cpu_runnable(ep, d)]
        for family, dtype in ep_vlm_parity.vlm_matrix(ep, cpu_dtypes):
            out.setdefault((family, dtype), set()).add(VISION_LANGUAGE)
    return out


def path(root: str, family: str, dtype: str, name: str) -> str:
    return os.path.join(root, family, dtype, f"{name}.pickle")


def sha256(built) -> str:
    """Of every model the generic runs read: the decoder ("model") for a decoder case,
    the whole package for a vision-language one (its models' bytes in key order)."""
    digest = hashlib.sha256()
    for key in sorted(built.serialized or built.models):
        digest.update(key.encode() + b"\0" + built.onnx_bytes(key))
    return digest.hexdigest()


def make(built, family: str, name: str):
    """The generic run of case ``name``, as the parity test would make it in-process."""
    if name == VISION_LANGUAGE:
        return ep_vlm_parity.generic_trace(built, family)
    backend, pad = name.split("-pad")
    return ep_parity.generic_run(built.onnx_bytes(), built.config, built.dtype, pad=int(pad),
                                 backend=backend)


def write(file: str, built, family: str, name: str) -> None:
    """Runs the generic graphs of case ``name`` and stores the run."""
    os.makedirs(os.path.dirname(file), exist_ok=True)
    run = make(built, family, name)
    with open(file, "wb") as f:
        pickle.dump((sha256(built), run), f, protocol=pickle.HIGHEST_PROTOCOL)


def roots() -> list[str] | None:
    """The actions' output folders in this test's runfiles (ep/generic_runs/<shard>), else
    None (outside Bazel, or a target without them in its data)."""
    top = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                       "ep", "generic_runs")
    if not os.path.isdir(top):
        return None
    return [os.path.join(top, shard) for shard in sorted(os.listdir(top))]


def load(built, family: str, name: str):
    """The stored generic run of case ``name`` of this generic build, or None where there
    is no store (the test then runs it); a store without this case, or one made from other
    bytes, is an error."""
    folders = roots()
    if folders is None:
        return None
    for root in folders:
        file = path(root, family, built.dtype, name)
        if os.path.exists(file + ".error"):
            with open(file + ".error") as f:
                raise RuntimeError(f"the generic run failed in its action:\n{f.read()}")
        if os.path.exists(file):
            with open(file, "rb") as f:
                digest, run = pickle.load(f)
            if digest != sha256(built):
                raise RuntimeError(f"{file} was run on other graphs than the default "
                                   f"{family}/{built.dtype} build this test loaded")
            return run
    raise KeyError(f"no stored generic run {family}/{built.dtype}/{name}: add the case to "
                   "testing/generic_runs.cases")
