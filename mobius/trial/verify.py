"""``mobius verify OUT [--against CHECKPOINT]``: the package and its checkpoint in
transformers on a few fixed inputs, so a user knows their own model came out right.

Printed per output: the max |difference| against the tolerance of the package's dtype
(mobius/trial/tolerances.py); for decoders, greedy-token agreement; for int4 / int8
packages, the quality change against the float model. The exit status is 1 when an
output is out of tolerance, so a script can gate on it.

torch and transformers are an optional extra (``pip install mobius[verify]``); they are
imported only here, inside the command, so building never needs them.
"""

from __future__ import annotations

import os

from mobius.errors import MobiusError
from mobius.trial.package import Package, open_package
from mobius.trial.verify_decoder import check_decoder
from mobius.trial.verify_encoder import check_encoder

#: the tasks verify compares (text in, the task's tensors out)
VERIFIES = ("text-generation", "feature-extraction", "text-classification",
            "token-classification", "fill-mask")

#: the tasks verify compares (text in, the task's tensors out)
VERIFIES = ("text-generation", "feature-extraction", "text-classification",
            "token-classification", "fill-mask")
def verify(folder: str, against: str | None) -> int:
    """Prints the report; 0 when every checked output is within tolerance, else 1."""
    package = open_package(folder)
    if package.task not in VERIFIES:
        raise MobiusError(f"mobius verify cannot compare a {package.task} package (it compares "
                          f"{', '.join(VERIFIES)})")
    if package.task == "text-generation":
        package.check_genai("verify")
    checkpoint = _checkpoint(package, against)
    torch, transformers = _reference_modules()
    check = check_decoder if package.task == "text-generation" else check_encoder
    checks = check(package, checkpoint, torch, transformers)
    print(f"{package.folder} ({package.task}, {package.dtype}"
          f"{', ' + package.quant if package.quant else ''}) against {checkpoint}")
    failed = [c for c in checks if c.passed is False]
    for check in checks:
        mark = {True: "ok", False: "FAIL", None: "--"}[check.passed]
        print(f"  {mark:4} {check.text}")
    print("verify: " + ("failed: " + "; ".join(c.text for c in failed) if failed else "passed"))
    return 1 if failed else 0


def _checkpoint(package: Package, against: str | None) -> str:
    """``--against``, else the checkpoint folder the package records it was built from."""
    path = against or package.source
    if not path:
        raise MobiusError(f"{package.folder} records no source checkpoint; pass --against "
                          f"CHECKPOINT")
    if not os.path.isfile(os.path.join(path, "config.json")):
        how = "--against" if against else "the package's recorded source"
        raise MobiusError(f"{how} {path} is not a checkpoint folder (no config.json); pass "
                          f"--against CHECKPOINT")
    return path


def _reference_modules():
    """torch and transformers, or the extra that installs them."""
    try:
        import torch
        import transformers
    except ImportError as e:
        raise MobiusError(f"mobius verify needs torch and transformers ({e.name} is not "
                          f"installed): pip install mobius[verify]") from None
    transformers.logging.set_verbosity_error()  # load reports would bury the comparison
    transformers.utils.logging.disable_progress_bar()
    return torch, transformers
