"""GPU test support (tests tagged "gpu", run by `./bazelw test //... --config=gpu`).

Under --config=gpu a machine without the GPU or without onnxruntime's CUDA build is a
failure with one clear line, never a skip: the point of the run is to exercise the GPU.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from mobius.ep.registry import get_ep


def require_provider(ep: str, *, optional: bool = False) -> str:
    """The onnxruntime provider of ``ep``, checked to be installed and to see a GPU.

    ``optional``: the provider is not in every GPU build of onnxruntime (TensorRT-RTX);
    its absence then skips, with the reason, while a missing GPU still fails.
    """
    import onnxruntime as ort

    require_nvidia_gpu()
    if hasattr(ort, "preload_dlls"):  # CUDA / cuDNN from the nvidia-* wheels, if installed
        ort.preload_dlls()
    provider = get_ep(ep).ort_provider
    available = ort.get_available_providers()
    if provider not in available:
        message = (f"--config=gpu: onnxruntime {ort.__version__} from {ort.__file__} has no "
                   f"{provider} (providers: {', '.join(available)})")
        if optional and "CUDAExecutionProvider" in available:
            pytest.skip(message)
        pytest.fail(message + "; ./bazelw installs requirements-gpu.txt under --config=gpu",
                    pytrace=False)
    return provider


def require_nvidia_gpu() -> None:
    smi = shutil.which("nvidia-smi")
    listed = subprocess.run([smi, "-L"], capture_output=True, text=True) if smi else None
    if listed is None or listed.returncode != 0 or "GPU" not in listed.stdout:
        reason = "nvidia-smi not found" if smi is None else (listed.stderr or listed.stdout).strip()
        pytest.fail(f"--config=gpu needs an NVIDIA GPU and none is visible ({reason})",
                    pytrace=False)


def session(model_path: str, provider: str, **provider_options):
    """An InferenceSession that must really run on ``provider`` (no silent CPU fallback)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 3
    created = ort.InferenceSession(model_path, options,
                                   providers=[(provider, provider_options), "CPUExecutionProvider"])
    assert created.get_providers()[0] == provider, created.get_providers()
    return created
