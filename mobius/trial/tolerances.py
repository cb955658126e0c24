"""How far a package's outputs may be from the reference's, per dtype: ``mobius verify``
(against transformers in float32) and the EP parity suites (testing/ep_parity.py: an EP's
graph against the generic one at the same dtype) share them.

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


#: f16 / bf16 against a float32 reference: units of the dtype's epsilon times
#: max(1, largest |reference|). The package rounds every weight and activation (eps/2
#: each); measured on tiny checkpoints: 0.7-1.25 on encoder outputs
#: (mobius/models/encoder_parity_test.py), 5.3 (f16) and 3.1 (bf16) on tiny-llama's
#: logits, so 12 leaves >= 2x headroom while an f16 defect of 1.2% of the scale fails.
LOWP_EPS = 12
_EPS = {"f16": 2.0**-10, "bf16": 2.0**-7}


def against_f32(scale: float, dtype: str) -> float:
    """The largest |difference| a ``dtype`` package may have from a float32 reference whose
    largest magnitude is ``scale``."""
    return F32_ATOL if dtype == "f32" else LOWP_EPS * _EPS[dtype] * max(1.0, scale)
