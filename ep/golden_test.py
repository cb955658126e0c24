"""L5 golden snapshots of one EP ($MOBIUS_EP, set by ep_suite()): ep/<dir>/golden and
golden_int4 (float only where the EP refuses --quant int4). The suite: ep/golden_suite.py."""

from ep import golden_suite
from testing import ep_suite as s

globals().update(golden_suite.tests_for(s.suite_ep()))
