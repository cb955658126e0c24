"""``adapters/<name>.onnx_adapter``: LoRA adapters onnxruntime-genai loads at run time.

The file is onnxruntime's adapter format (written with
``onnxruntime.AdapterFormat``): named tensors that ``og.Adapters.load`` reads
and ``Generator.set_active_adapter`` binds to the decoder's inputs of the same
names (mobius/tasks/lora_inputs.py). Every file carries every LoRA input of
the package; a Linear an adapter does not target gets empty (rank 0)
matrices, which add nothing.
"""

from __future__ import annotations

import os

import numpy as np

from mobius.tasks.lora_inputs import lora_input_names
from mobius.weights.lora_adapter import LoraAdapter

FOLDER = "adapters"
SUFFIX = ".onnx_adapter"


def adapter_path(package_dir: str, name: str) -> str:
    return os.path.join(package_dir, FOLDER, name + SUFFIX)


def write_adapters(folder: str, adapters: list[LoraAdapter], targets: dict[str, tuple[int, int]],
                   dtype: np.dtype) -> None:
    """Writes one adapter file per adapter into ``folder``/adapters/."""
    import onnxruntime

    os.makedirs(os.path.join(folder, FOLDER), exist_ok=True)
    for adapter in adapters:
        params = {}
        for weight, (in_features, out_features) in targets.items():
            a_name, b_name = lora_input_names(weight)
            if weight in adapter.pairs:
                a, b = adapter.matrices(weight, dtype)
            else:
                a, b = np.zeros((in_features, 0), dtype), np.zeros((0, out_features), dtype)
            params[a_name] = onnxruntime.OrtValue.ortvalue_from_numpy(a)
            params[b_name] = onnxruntime.OrtValue.ortvalue_from_numpy(b)
        writer = onnxruntime.AdapterFormat()
        writer.set_adapter_version(1)
        writer.set_model_version(1)
        writer.set_parameters(params)
        writer.export_adapter(adapter_path(folder, adapter.name))
