"""onnxruntime sessions a test creates run on one intra-op thread unless the test says otherwise.

Bazel runs two tests at a time on the CI machine's two cores. A session's default pool (a
thread per core, spinning while it waits for work) then competes with the other test for
both cores. Measured on the tiny Llama of the EP suites, 20,000 runs of one prompt: one
thread 2.1 s alone and 2.1 s beside a second such process; the default pool 2.1 s alone
and 4.4 s beside it (3.7-4.0 s without spinning). The tests' tiny models gain nothing from
a second thread. testing/run_pytest.py applies this once onnxruntime is imported; a test
that sets ``intra_op_num_threads`` keeps its own.
"""

from __future__ import annotations

import sys

_MARK = "_mobius_one_thread"


def default_to_one_thread() -> None:
    """Makes onnxruntime.InferenceSession default to one intra-op thread, if onnxruntime is
    imported (importing it here would cost every test process that never uses it)."""
    ort = sys.modules.get("onnxruntime")
    if ort is None or getattr(ort.InferenceSession.__init__, _MARK, False):
        return
    base = ort.InferenceSession.__init__

    def __init__(self, path_or_bytes, sess_options=None, *args, **kwargs):
        options = sess_options if sess_options is not None else ort.SessionOptions()
        if options.intra_op_num_threads == 0:  # 0: onnxruntime's default, a thread per core
            options.intra_op_num_threads = 1
        base(self, path_or_bytes, options, *args, **kwargs)

    setattr(__init__, _MARK, True)
    ort.InferenceSession.__init__ = __init__
