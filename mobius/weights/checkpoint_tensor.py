"""A checkpoint tensor read lazily, whose unchanged bytes are copied file to file.

Most of a float32 package is the checkpoint's bytes as they are (embeddings,
norms, a Gemm-layout LM head). For those, ``tofile`` asks the kernel to copy
the byte range from the safetensors file into the package's data file
(``copy_file_range``): no page of the tensor is mapped into this process, so
the build's memory does not grow with the largest tensor. A tensor with a
``fill`` (transposed or converted) is computed straight into its slice of the
data file, mapped (mapped_write.py); anything else is read, transformed and
written.
"""

from __future__ import annotations

import errno
import os
from typing import Callable

import numpy as np
import onnx_ir as ir

from mobius.errors import WeightsError
from mobius.weights.dtypes import numpy_dtype
from mobius.weights.mapped_write import FillableTensor, has_fileno
from mobius.weights.safetensors_checkpoint import TensorInfo

#: bytes per kernel call, and the buffer of the read/write fallback
_CHUNK = 64 << 20
#: errors meaning "this kernel or file system cannot copy_file_range": fall back
_NO_KERNEL_COPY = {errno.ENOSYS, errno.EXDEV, errno.EINVAL, errno.EOPNOTSUPP, errno.EPERM}


class CheckpointTensor(FillableTensor):
    """``load()`` gives the initializer (``fill(out)``, if given, computes it into
    ``out``); ``source`` is the checkpoint tensor it comes from, whose bytes are
    the initializer's when nothing transforms them."""

    #: for a transposed checkpoint tensor: a function making the same values in the
    #: checkpoint's layout (another CheckpointTensor, untransposed; see weights/attach.py)
    checkpoint_layout: Callable[[], "CheckpointTensor"] | None = None
    #: for a tensor that is the checkpoint's rows as stored (perhaps converted):
    #: ``read_rows(start, stop)`` gives its rows [start, stop) alone, mapped only
    #: while the result lives, so a large one is processed a band at a time
    #: (quantize/rtn.py's ``quantize_rtn_rows``; see weights/attach.py)
    read_rows: Callable[[int, int], np.ndarray] | None = None

    def __init__(self, load: Callable[[], ir.TensorProtocol], dtype: ir.DataType,
                 shape: ir.Shape, *, name: str, source: TensorInfo, transformed: bool,
                 fill: Callable[[np.ndarray], None] | None = None):
        super().__init__(load, dtype, shape, name=name, fill=fill)
        same_bytes = (not transformed and np.dtype(source.dtype) == np.dtype(numpy_dtype(dtype))
                      and source.end - source.begin == self.nbytes)
        self.copy_from = source if same_bytes else None
        if same_bytes:
            self.fill = None

    def tofile(self, file) -> None:
        if self.copy_from is not None and has_fileno(file):
            file.flush()
            start = file.tell()
            copy_range(self.copy_from, file.fileno(), start)
            file.seek(start + self.nbytes)
        else:
            super().tofile(file)


def copy_range(source: TensorInfo, out_fd: int, out_offset: int) -> None:
    """Copies the tensor's bytes to ``out_fd`` at ``out_offset``, in the kernel when it can."""
    length = source.end - source.begin
    with open(source.path, "rb") as f:
        done = 0
        try:
            while done < length:
                n = os.copy_file_range(f.fileno(), out_fd, min(_CHUNK, length - done),
                                       source.begin + done, out_offset + done)
                if n == 0:
                    raise _shrunk(source)
                done += n
        except OSError as e:
            if e.errno not in _NO_KERNEL_COPY:
                raise
            _read_write(f.fileno(), out_fd, source, done, out_offset)


def _read_write(in_fd: int, out_fd: int, source: TensorInfo, done: int, out_offset: int) -> None:
    length = source.end - source.begin
    while done < length:
        chunk = os.pread(in_fd, min(_CHUNK, length - done), source.begin + done)
        if not chunk:
            raise _shrunk(source)
        written = 0
        while written < len(chunk):  # pwrite may write less than asked
            written += os.pwrite(out_fd, memoryview(chunk)[written:], out_offset + done + written)
        done += len(chunk)


def _shrunk(source: TensorInfo) -> WeightsError:
    return WeightsError(f"cannot read {source.name!r} from {os.path.basename(source.path)}: the "
                        "file ended early; was it changed while mobius was running?")
