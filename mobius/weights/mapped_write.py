"""Writing a tensor straight into its slice of the data file, through a shared mapping.

A transformed checkpoint tensor (the transposed projections: most of a float
package) used to be built in a temporary array and written to the data file
with ``write()``: the kernel then copied every byte again into the page
cache, and fresh anonymous pages were zeroed for the array (perf,
llama3.2-1b: 47% and 8% of the build's CPU). Mapping the tensor's slice of
the file and computing the tensor in place does neither (the page cache's
own pages are zeroed once when faulted in); the slice is unmapped as soon as
it is filled, so its pages leave the process (they stay dirty in the page
cache, written back like any other, and fsynced before the package is put
in place).

A full disk must stay an error, not a crash: a store to a mapped page the file
system cannot back kills the process with SIGBUS. So the slice is first
faulted in writable (``MADV_POPULATE_WRITE``, Linux 5.14+), which reports that
case as an error instead; then nothing is written through the mapping and the
caller writes as before, where the full disk raises ENOSPC. Where a step is
not available (not Linux, no /proc, no populate, a file that cannot be
mapped), ``write_mapped`` returns False the same way.

``FillableTensor`` is the lazy initializer that is saved this way: its
``fill(out)`` computes its values into a given array.
"""

from __future__ import annotations

import mmap
import os
import sys
from typing import Callable

import numpy as np
import onnx_ir as ir

#: madvise(2): fault the range in, writable, now (<asm-generic/mman-common.h>)
MADV_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23)


#: dtypes whose bytes are a numpy array's (``fill`` gets such an array)
_WHOLE_BYTES = {ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16}


class FillableTensor(ir.LazyTensor):
    """An ``ir.LazyTensor`` (``func()`` gives the tensor) that ``fill(out)`` can also
    compute into ``out``, a writable array of its numpy dtype and shape (possibly
    strided): saved straight into the mapped data file."""

    def __init__(self, func: Callable[[], ir.TensorProtocol], dtype: ir.DataType,
                 shape: ir.Shape, *, name: str | None = None,
                 fill: Callable[[np.ndarray], None] | None = None):
        super().__init__(func, dtype, shape, name=name)
        self.fill = fill if dtype in _WHOLE_BYTES else None

    def tofile(self, file) -> None:
        if self.fill is None or not write_mapped(file, self.nbytes, self._fill_bytes):
            super().tofile(file)

    def _fill_bytes(self, buffer: np.ndarray) -> None:
        self.fill(buffer.view(self.dtype.numpy()).reshape(self.shape.numpy()))


def fill_into(tensor: ir.TensorProtocol, out: np.ndarray) -> None:
    """Writes ``tensor``'s values into ``out``: in place where it is fillable."""
    if isinstance(tensor, FillableTensor) and tensor.fill is not None:
        tensor.fill(out)
    else:
        out[...] = tensor.numpy()


def write_tensor(tensor: ir.TensorProtocol, file) -> None:
    """Writes ``tensor``'s bytes at ``file``'s position through its own ``tofile`` where it
    has one (a file-to-file copy, a mapped fill), so a wrapper keeps that way of writing."""
    if hasattr(tensor, "tofile"):
        tensor.tofile(file)
    else:
        file.write(tensor.tobytes())


def write_mapped(file, nbytes: int, fill: Callable[[np.ndarray], None]) -> bool:
    """Writes ``nbytes`` at ``file``'s position: ``fill(buffer)`` fills a writable
    uint8 array mapped onto that slice of the file; then ``file`` is positioned
    after it. False: the slice cannot be mapped here, nothing was written."""
    if nbytes == 0 or not sys.platform.startswith("linux") or not has_fileno(file):
        return False
    file.flush()
    start = file.tell()
    try:  # the writer's descriptor is write-only; a shared mapping needs read + write
        fd = os.open(f"/proc/self/fd/{file.fileno()}", os.O_RDWR | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        mapping = _populated_mapping(fd, start, nbytes)
    finally:
        os.close(fd)  # the mapping keeps the file
    if mapping is None:
        return False
    buffer = np.frombuffer(mapping, np.uint8, nbytes, start % mmap.ALLOCATIONGRANULARITY)
    fill(buffer)  # if this raises, the mapping is unmapped once the traceback lets go of it
    del buffer
    mapping.close()
    file.seek(start + nbytes)
    return True


def _populated_mapping(fd: int, start: int, nbytes: int) -> mmap.mmap | None:
    """A shared read-write mapping of bytes [start, start + nbytes) (from the page
    holding ``start``), every page already faulted in writable; None if not possible."""
    end = start + nbytes
    base = start - start % mmap.ALLOCATIONGRANULARITY
    try:
        if os.fstat(fd).st_size < end:
            os.ftruncate(fd, end)  # a hole: no disk space is taken yet
        mapping = mmap.mmap(fd, end - base, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE,
                            offset=base)
    except (OSError, ValueError):
        return None
    try:
        mapping.madvise(MADV_POPULATE_WRITE)
    except OSError:  # EINVAL: an older kernel; EFAULT: the file system cannot back a page
        mapping.close()
        return None
    return mapping


def has_fileno(file) -> bool:
    """Whether ``file`` is backed by a descriptor (not e.g. an io.BytesIO)."""
    try:
        file.fileno()
    except (AttributeError, OSError, ValueError):
        return False
    return True
