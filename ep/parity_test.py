"""L3 parity of one EP ($MOBIUS_EP, set by ep_suite()) on onnxruntime's CPU EP; the suite is
ep/parity_suite.py. An EP whose parity differs in kind (default: the reference, checked
against itself) has its own ep/<dir>/<dir>_parity_test.py instead."""

from ep import parity_suite
from testing import ep_suite as s

globals().update(parity_suite.tests_for(s.suite_ep()))
