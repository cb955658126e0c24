"""The WebGPU EP (native, Dawn over Vulkan) for the real-backend tests, on this GPU-less machine.

./bazelw installs, into $MOBIUS_WEBGPU_SITE (requirements-webgpu.txt, webgpu-debs.lock):
  python/     onnxruntime-webgpu, onnxruntime's own build with the WebGPU EP
  vulkan/     Debian bookworm-backports' Mesa (lavapipe, a software Vulkan driver on
              the CPU) and the Vulkan loader, unpacked from their .debs (no root)
  lvp_icd.json  the Vulkan ICD manifest naming that lavapipe by absolute path
Only the worker process sees them (VK_ICD_FILENAMES, LD_LIBRARY_PATH). Why these:
Debian 12's own lavapipe (Mesa 22.3) lacks shaderUniformBufferArrayDynamicIndexing,
which Dawn requires; Mesa 25's has it. Why the full build and not the plugin
onnxruntime-ep-webgpu on the pinned onnxruntime: the plugin offers a device only
where sysfs lists a DRM card, and a container has none (docs/eps.md, "WebGPU").
"""

from __future__ import annotations

import functools
import os
import tempfile

from testing.real_backend import Backend

_LIB = os.path.join("vulkan", "usr", "lib", "x86_64-linux-gnu")


def _worker_env(site: str) -> dict[str, str]:
    icd = os.path.join(site, "lvp_icd.json")
    libs = os.pathsep.join(p for p in (os.path.join(site, _LIB),
                                       os.environ.get("LD_LIBRARY_PATH")) if p)
    return {
        # both names: older loaders read VK_ICD_FILENAMES, newer ones prefer VK_DRIVER_FILES
        "VK_ICD_FILENAMES": icd, "VK_DRIVER_FILES": icd, "LD_LIBRARY_PATH": libs,
        # lavapipe compiles each WebGPU shader with LLVM, most of a cold run's time: one
        # cache for the test's workers (a genai run reuses the sessions' shaders), kept
        # in the test's own temp folder (Mesa's default is ~/.cache), and unoptimized
        # machine code (tiny models: compiling costs more than running)
        "MESA_SHADER_CACHE_DIR": _shader_cache(), "GALLIVM_PERF": "nopt",
    }


@functools.cache
def _shader_cache() -> str:
    return tempfile.mkdtemp(prefix="mesa-shader-cache-", dir=os.environ.get("TEST_TMPDIR"))


BACKEND = Backend(
    ep="webgpu",
    provider="WebGpuExecutionProvider",
    site_variable="MOBIUS_WEBGPU_SITE",
    python_dir=lambda site: os.path.join(site, "python"),
    worker_env=_worker_env,
)
