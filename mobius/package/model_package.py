"""ModelPackage and its atomic save.

Everything is written into a hidden staging folder beside the output path and
renamed into place only when complete, so a failed or interrupted build never
leaves a half-written package (and never destroys the previous one).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from typing import Any

import onnx_ir as ir

from mobius.errors import OutputError
from mobius.package.hf_folder import write_model_folder
from mobius.package.manifest import check_replaceable, write_manifest
from mobius.package.output_swap import (InterruptedAfterSave, OutputExistsError, is_disk_full,
                                        locked, make_staging, mark_ready, place, recover)
from mobius.package.overlap import check_no_overlap
from mobius.package.preallocate import Preallocation
from mobius.package.writeback import EarlyWriteback


#: initializers of at most this many bytes stay inside the .onnx file
_INLINE_BYTES = 256


@dataclasses.dataclass
class ModelPackage:
    """The result of a build: one or more ONNX models plus package metadata.

    ``models`` maps a role key ("model", or "vision"/"embedding"/... for
    multi-model packages) to its ONNX model. The "model" key is saved as
    model.onnx, any other key as <key>.onnx; each with its <file>.data.
    """

    models: dict[str, ir.Model]
    genai_config: dict[str, Any] | None = None
    files_to_copy: list[str] = dataclasses.field(default_factory=list)
    #: further JSON files of the package, file name -> content (Whisper's
    #: audio_processor_config.json for onnxruntime-genai's audio processor)
    extra_json: dict[str, Any] = dataclasses.field(default_factory=dict)
    config: Any = None
    #: the checkpoint folder it was built from: save() refuses to write into or over it
    source: str | None = None
    #: the task it was built for (a registered task name), recorded for ``mobius run``
    task: str | None = None
    #: folder layout: "genai" (onnxruntime-genai), "transformers.js"
    #: (mobius/package/transformers_js.py) or "optimum" (optimum_layout.py), with the build dtype it names files by
    layout: str = "genai"
    build_dtype: str = "f32"
    #: weight quantization asked for ("int4" / "int8"; None: float): the
    #: transformers.js layout names its files by it
    quant: str | None = None
    #: the checkpoint's config.json / generation_config.json as stated (the transformers.js
    #: layout's config.json adds to it; a GGUF source's package writes them)
    hf_configs: dict[str, Any] = dataclasses.field(default_factory=dict)
    #: the source's model-folder files (configs, sentence-transformers modules), relative to
    #: ``source``, copied into every layout (mobius/package/hf_folder.py)
    model_files: list[str] = dataclasses.field(default_factory=list)
    #: LoRA adapters written as separate files (mobius/package/adapter_files.py),
    #: the decoder inputs they feed (weight -> (in, out)) and their dtype
    adapters: list[Any] = dataclasses.field(default_factory=list)
    adapter_targets: dict[str, tuple[int, int]] = dataclasses.field(default_factory=dict)
    adapter_dtype: Any = None

    @property
    def model(self) -> ir.Model:
        return self.models["model"]

    @staticmethod
    def filename(key: str) -> str:
        return "model.onnx" if key == "model" else f"{key}.onnx"

    @staticmethod
    def check_output(output_dir: str, *, overwrite: bool = False,
                     source: str | None = None) -> str:
        """Refuses an output path that save() would refuse; returns it absolute.

        ``overwrite`` replaces only an empty folder or a mobius package
        (mobius/package/manifest.py), never a folder holding anything else.

        The CLI calls this before building, so a bad path fails in seconds,
        not after a long build. It also finishes or undoes what an earlier,
        killed save into the same path left behind.
        """
        output_dir = os.path.abspath(output_dir)
        if not os.path.basename(output_dir):
            raise OutputError(f"output path {output_dir} is a file system root")
        if source is not None:
            check_no_overlap(output_dir, source)
        if os.path.isdir(os.path.dirname(output_dir)):
            with locked(os.path.dirname(output_dir)):
                recover(output_dir)
        if os.path.lexists(output_dir):
            if os.path.islink(output_dir):
                raise OutputError(f"output path {output_dir} is a symbolic link; give the "
                                  f"folder it points to ({os.path.realpath(output_dir)})")
            if not os.path.isdir(output_dir):
                raise OutputError(f"output path {output_dir} exists and is not a folder")
            if os.listdir(output_dir) and not overwrite:
                raise OutputExistsError(output_dir)
            if overwrite:
                check_replaceable(output_dir)
        return output_dir

    def save(self, output_dir: str, *, overwrite: bool = False, progress: bool = False) -> str:
        """Writes the package into ``output_dir`` atomically; returns its absolute path.

        Without ``overwrite`` an existing non-empty folder is never replaced,
        even one that appears while the package is being written; with it, only
        an empty folder or a mobius package is (mobius/package/manifest.py).
        """
        output_dir = self.check_output(output_dir, overwrite=overwrite, source=self.source)
        parent = os.path.dirname(output_dir)
        try:
            os.makedirs(parent, exist_ok=True)
            staging = make_staging(output_dir)
            os.chmod(staging, 0o777 & ~_umask())  # mkdtemp makes 0700; a package is a normal folder
        except OSError as e:
            reason = e.strerror or str(e)
            if isinstance(e, (FileExistsError, NotADirectoryError)):
                reason = "a file is in the way of a folder on that path"
            raise OutputError(f"cannot write to {parent}: {reason}") from e
        try:
            self._write(staging, progress)
            staging = mark_ready(staging)
            place(staging, output_dir, overwrite)
        except InterruptedAfterSave:
            raise
        except BaseException as e:
            shutil.rmtree(staging, ignore_errors=True)
            if isinstance(e, OSError) and is_disk_full(e):
                raise OutputError(f"no space left on the device holding {parent}; "
                                  f"nothing was written") from None
            raise
        return output_dir

    def _write(self, folder: str, progress: bool) -> None:
        """Writes every file of the package into ``folder``, its manifest last."""
        self._write_files(folder, progress)
        write_manifest(folder, {"source": self.source, "task": self.task,
                                "dtype": self.build_dtype, "quant": self.quant,
                                "layout": self.layout})

    def _write_files(self, folder: str, progress: bool) -> None:
        if self.layout == "transformers.js":
            from mobius.package.transformers_js import write_transformers_js

            write_transformers_js(self, folder, _save_model, progress)
            return
        for key, model in self.models.items():
            path = os.path.join(folder, self.filename(key))
            os.makedirs(os.path.dirname(path), exist_ok=True)  # a sub-model's folder (mtp/)
            _save_model(model, path, progress)
        if self.genai_config is not None and self.layout != "optimum":
            with open(os.path.join(folder, "genai_config.json"), "w") as f:
                json.dump(self.genai_config, f, indent=4)
        for name, content in self.extra_json.items():
            os.makedirs(os.path.dirname(os.path.join(folder, name)), exist_ok=True)
            with open(os.path.join(folder, name), "w") as f:
                json.dump(content, f, indent=4)
        for path in self.files_to_copy:
            shutil.copy2(path, os.path.join(folder, os.path.basename(path)))
        write_model_folder(self, folder, written=set(self.extra_json))
        if self.adapters:
            from mobius.package.adapter_files import write_adapters

            write_adapters(folder, self.adapters, self.adapter_targets, self.adapter_dtype)


def _umask() -> int:
    """The process umask, read without os.umask's set-and-restore (not thread-safe)."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except OSError:
        pass
    return 0o022


def _save_model(model: ir.Model, path: str, progress: bool, data_name: str | None = None) -> None:
    """Saves one model; weights are read, converted and written one tensor at a time
    into ``data_name`` beside it (default: <file>.data), whose writeback to disk
    starts while later tensors are written."""
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(unit="tensor", desc=f"loading + writing weights of {os.path.basename(path)}")
    data_name = data_name or os.path.basename(path) + ".data"
    data_path = os.path.join(os.path.dirname(path), data_name)
    writeback = EarlyWriteback(data_path)
    reserved = Preallocation(data_path, _external_bytes(model))

    def on_tensor(tensor, info):  # called before tensor info.index is written at info.offset
        if info.index == 0:
            reserved.started()
        writeback.written(info.offset)
        if bar is not None:
            bar.total = info.total
            bar.update()

    try:
        ir.save(model, path, external_data=data_name, size_threshold_bytes=_INLINE_BYTES,
                callback=on_tensor, max_workers=1)
    finally:
        reserved.close()
        writeback.close()
        if bar is not None:
            bar.close()


def _external_bytes(model: ir.Model) -> int:
    """The size of the data file ``ir.save`` writes: every initializer above the inline
    size, packed one after another (onnx-ir aligns nothing unless asked)."""
    return sum(v.const_value.nbytes for graph in model.graphs()
               for v in graph.initializers.values()
               if v.const_value is not None and v.const_value.nbytes > _INLINE_BYTES)
