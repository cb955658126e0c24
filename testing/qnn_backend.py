"""The QNN EP (HTP backend, simulated on x86-64) for the real-backend tests.

onnxruntime-qnn 2.7.0 is not an onnxruntime build but an EP plugin library for the
pinned onnxruntime (libonnxruntime_providers_qnn.so; the QNN SDK's libQnnHtp.so
beside it runs here as an HTP simulator, there is no QNN CPU backend). ./bazelw
installs it into a folder of its own (requirements-qnn.txt), passed to tests as
$MOBIUS_QNN_SITE; the worker (testing/ep_worker.py) registers it with
``ort.register_execution_provider_library`` and gives sessions its one device
(``add_provider_for_devices``), with the package's provider options.
"""

from __future__ import annotations

from testing.real_backend import Backend

BACKEND = Backend(
    ep="qnn",
    provider="QNNExecutionProvider",
    site_variable="MOBIUS_QNN_SITE",
    python_dir=lambda site: site,
    plugin="onnxruntime_qnn",
)
