"""L3 parity for the openvino EP, on onnxruntime's CPU EP (the suite: ep/parity_suite.py)."""

from ep import parity_suite

globals().update(parity_suite.tests_for("openvino"))
