"""L3 parity for the qnn EP, on onnxruntime's CPU EP (the suite: ep/parity_suite.py): its
static decoders driven by testing/static_decoder.py against the generic graphs."""

from ep import parity_suite

globals().update(parity_suite.tests_for("qnn"))
