"""L5 golden snapshots of the qnn EP: ep/qnn/golden (float; --quant is refused for qnn).

The suite: ep/golden_suite.py.
"""

from ep import golden_suite

globals().update(golden_suite.tests_for("qnn"))
