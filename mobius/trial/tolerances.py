"""How far a package's outputs may be from the reference's, per dtype (shared by
``mobius verify`` and the EP parity suites, testing/ep_parity.py, which justify them).

f32: 1e-4 absolute -- EP kernels (GQA, Skip*LayerNorm) and standard ops differ only
in summation order, measured <= 1.5e-6 on O(1) logits.

f16 / bf16: 8 spacings of the dtype at the tensor's largest magnitude. Both sides round
every intermediate to the dtype at different points; the measured worst case is 1.75
(f16) and 2.5 (bf16) spacings, while a real defect (wrong scale, swapped heads, a
dropped norm) moves values by >= 10% of their scale, i.e. > 100 spacings.
"""

from __future__ import annotations

import numpy as np

F32_ATOL = 1e-4
HALF_ULPS = 8
FRACTION_BITS = {"f16": 10, "bf16": 7}


def spacing(scale: float, dtype: str) -> float:
    """The gap between adjacent ``dtype`` values near ``scale``."""
    return float(2.0 ** (np.floor(np.log2(max(scale, 2.0**-14))) - FRACTION_BITS[dtype]))


def tolerance(scale: float, dtype: str) -> float:
    """The largest |difference| allowed on a tensor whose largest magnitude is ``scale``."""
    return F32_ATOL if dtype == "f32" else HALF_ULPS * spacing(scale, dtype)
