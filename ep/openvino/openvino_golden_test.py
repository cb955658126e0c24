"""L5 golden snapshots of the openvino EP: ep/openvino/golden and golden_int4.

The suite: ep/golden_suite.py.
"""

from ep import golden_suite

globals().update(golden_suite.tests_for("openvino"))
