"""The OpenVINO EP for the real-backend tests (testing/real_backend.py runs it).

onnxruntime-openvino (its own onnxruntime build with the OpenVINO EP) is installed
by ./bazelw into a folder of its own (requirements-openvino.txt), passed to tests as
$MOBIUS_OPENVINO_SITE, so the onnxruntime the CPU tests import stays the pinned one.
Why not the plugin wheel onnxruntime-ep-openvino on the pinned onnxruntime: its EP
factory offers devices only of Intel's vendor id (0x8086), and this CPU is AMD, so
``ort.get_ep_devices()`` lists no OpenVINO device here (docs/eps.md, "OpenVINO").
"""

from __future__ import annotations

from testing.real_backend import Backend

BACKEND = Backend(
    ep="openvino",
    provider="OpenVINOExecutionProvider",
    site_variable="MOBIUS_OPENVINO_SITE",
    python_dir=lambda site: site,
)
