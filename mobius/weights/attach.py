"""Binds a module's Weight parameters to checkpoint tensors, lazily.

Every name and shape is checked up front (so a bad checkpoint fails before
anything is written); the data itself is read, transformed and converted only
when the saver asks for it, one tensor at a time.
"""

from __future__ import annotations

import dataclasses
import logging
import re

import ml_dtypes
import onnx_ir as ir
from onnxscript import nn

from mobius.components.weight import Sources, Weight, transpose
from mobius.errors import WeightsError
from mobius.weights.checkpoint_tensor import CheckpointTensor
from mobius.weights.dtypes import (check_cast, check_source_dtype, convert_array, convert_into,
                                   warn_if_not_finite)
from mobius.weights.prequantized_checkpoint import (PREQUANTIZED, PrequantizedCheckpoint,
                                                   source_for)
from mobius.weights.safetensors_checkpoint import SafetensorsCheckpoint, TensorInfo

logger = logging.getLogger(__name__)

#: tensor meta key: the checkpoint tensor an initializer is read from
CHECKPOINT_NAME = "mobius.checkpoint_name"


@dataclasses.dataclass(frozen=True)
class IgnoredTensors:
    """Checkpoint tensors a family knowingly does not read, and why.

    A checkpoint tensor the module does not read is an error (a family that
    silently dropped a real weight would otherwise still build); a family
    declares the ones it may skip, e.g. rotary ``inv_freq`` buffers that it
    recomputes, or a head its task does not use.
    """

    pattern: str  #: regular expression, matched in full against the checkpoint name
    reason: str

    def matches(self, name: str) -> bool:
        return re.fullmatch(self.pattern, name) is not None


def ignored_layers(prefix: str, first: int, count: int, reason: str) -> tuple[IgnoredTensors, ...]:
    """Layers ``first`` .. ``count - 1`` of a stack (tensors ``<prefix><i>.*``, ``prefix`` a
    regular expression): a tower whose features are a hidden state before its last layer
    leaves the deeper layers unread. Empty when there are none."""
    if first >= count:
        return ()
    layers = "|".join(str(i) for i in range(first, count))
    return (IgnoredTensors(prefix + rf"({layers})\..*", reason),)


def attach_weights(module: nn.Module, checkpoint: SafetensorsCheckpoint | PrequantizedCheckpoint,
                   prefixes: tuple[str, ...] = ("",),
                   aliases: tuple[tuple[str, tuple[str, ...]], ...] = (),
                   ignorable: tuple[IgnoredTensors, ...] = ()) -> None:
    """``prefixes``: what a checkpoint may put before the module's names (the
    first one under which the checkpoint has the model's first tensor wins).
    ``aliases``: (module-name prefix, checkpoint spellings of it) pairs; for the
    names under one such prefix, the first spelling under which the checkpoint
    has the first of them wins (each prefix decided on its own).
    ``ignorable``: the checkpoint tensors the module may leave unread; any
    other unread tensor raises WeightsError."""
    used = set()
    prefix = None
    chosen: dict[str, str] = {}
    for name, param in module.named_parameters():
        if not isinstance(param, Weight):
            continue
        if param.sources is not None:
            prefix, names = _spelling(param.sources, name,
                                      prefixes if prefix is None else (prefix,), checkpoint)
            used.update(_attach_sources(param, names, checkpoint))
            continue
        source = _alias(param.checkpoint_name or name, aliases, chosen, checkpoint)
        if prefix is None:
            prefix = next((p for p in prefixes if p + source in checkpoint), prefixes[0])
        source = prefix + source
        if source not in checkpoint:
            raise WeightsError(f"checkpoint is missing tensor {source!r}")
        info = checkpoint.info(source)
        if tuple(info.shape) != param.checkpoint_shape:
            raise WeightsError(
                f"tensor {source!r} has shape {list(info.shape)} in the checkpoint "
                f"but the model expects {list(param.checkpoint_shape)}"
            )
        check_source_dtype(source, info.dtype, param.dtype)
        used.add(source)
        param.const_value = _checkpoint_tensor(checkpoint, info, param, param.transform)
        if param.transform is transpose:
            param.const_value.checkpoint_layout = _checkpoint_layout(checkpoint, info, param)
        packed = checkpoint.packed(source) if hasattr(checkpoint, "packed") else None
        if packed is not None:  # GPTQ / AWQ: the quantization pass emits these integers
            param.const_value.meta[PREQUANTIZED] = source_for(
                checkpoint, packed, _rows_then(param.checkpoint_rows, param.transform))
    _check_unused([n for n in checkpoint.names() if n not in used], ignorable)


def _relative(source: str, param_name: str) -> str:
    """``source`` (relative to the parameter's module) as a full module name."""
    module = param_name.rpartition(".")[0]
    return f"{module}.{source}" if module else source


def _spelling(sources: Sources, param_name: str, prefixes: tuple[str, ...],
              checkpoint) -> tuple[str, list[str]]:
    """The first (prefix, spelling) whose first tensor the checkpoint holds, as
    (prefix, checkpoint names); the first pair when none does."""
    for prefix in prefixes:
        for spelling in sources.spellings:
            names = [prefix + _relative(s, param_name) for s in spelling]
            if names[0] in checkpoint:
                return prefix, names
    return prefixes[0], [prefixes[0] + _relative(s, param_name) for s in sources.spellings[0]]


def _attach_sources(param: Weight, names: list[str], checkpoint) -> list[str]:
    """Binds a parameter computed from several tensors (checked now, combined when saved)."""
    infos = []
    for source, shape in zip(names, param.sources.shapes):
        if source not in checkpoint:
            raise WeightsError(f"checkpoint is missing tensor {source!r}")
        info = checkpoint.info(source)
        if tuple(info.shape) != tuple(shape):
            raise WeightsError(f"tensor {source!r} has shape {list(info.shape)} in the "
                               f"checkpoint but the model expects {list(shape)}")
        check_source_dtype(source, info.dtype, param.dtype)
        infos.append(info)

    def load() -> ir.Tensor:
        arrays = [checkpoint.read(source) for source in names]
        for source, array in zip(names, arrays):
            warn_if_not_finite(source, array)
        return ir.Tensor(convert_array(param.sources.combine(*arrays), param.dtype, names[0]),
                         name=param.name)

    param.const_value = CheckpointTensor(load, param.dtype, ir.Shape(param.shape),
                                         name=param.name, source=infos[0], transformed=True)
    return names


def _check_unused(unused: list[str], ignorable: tuple[IgnoredTensors, ...]) -> None:
    unexpected = [n for n in unused if not any(i.matches(n) for i in ignorable)]
    if unexpected:
        raise WeightsError(f"the model does not read {len(unexpected)} checkpoint tensor(s), "
                           f"e.g. {unexpected[:3]}; an unsupported variant of the family?")
    if unused:
        logger.info("ignoring %d declared-ignorable checkpoint tensors, e.g. %s",
                    len(unused), unused[:3])


def _alias(source: str, aliases, chosen: dict[str, str], checkpoint) -> str:
    """``source`` with its aliased module prefix (longest match) respelled."""
    match = max((a for a in aliases if source.startswith(a[0])), key=lambda a: len(a[0]),
                default=None)
    if match is None:
        return source
    module_prefix, spellings = match
    rest = source[len(module_prefix):]
    if module_prefix not in chosen:
        chosen[module_prefix] = next((s for s in spellings if s + rest in checkpoint), spellings[0])
    return chosen[module_prefix] + rest


def _checkpoint_tensor(checkpoint, info, param: Weight, transform) -> CheckpointTensor:
    """``param``'s initializer: its rows of checkpoint tensor ``info`` after ``transform``,
    read when saved."""
    rows = param.checkpoint_rows
    source = info if rows is None else _row_range(info, *rows)
    shape = param.shape if transform is param.transform else source.shape
    as_stored = checkpoint.is_stored_as_read(info.name)
    tensor = CheckpointTensor(
        _loader(checkpoint, info.name, rows, param.dtype, param.name, transform), param.dtype,
        ir.Shape(shape), name=param.name, source=source,
        transformed=transform is not None or not as_stored,
        fill=_filler(checkpoint, info.name, rows, param.dtype, transform))
    tensor.meta[CHECKPOINT_NAME] = info.name
    if transform is None:
        tensor.read_rows = _rows_reader(checkpoint, info.name, rows, param.dtype)
    return tensor


def _rows_reader(checkpoint, source: str, rows: tuple[int, int] | None, dtype: ir.DataType):
    """``read_rows(start, stop)``: rows [start, stop) of the parameter (of its own rows of
    ``source`` if given), converted like the whole tensor and checked finite (one
    warning per tensor, however many bands hold NaN or Inf)."""
    first = 0 if rows is None else rows[0]
    warned = False
    rows_of = getattr(checkpoint, "read_rows", None)

    def read_rows(start: int, stop: int):
        nonlocal warned
        if rows_of is not None:  # computed tensors (GGUF, FP8, MXFP4): only these rows
            array = rows_of(source, first + start, first + stop)
        else:
            array = checkpoint.read(source)[first + start:first + stop]
        if not warned:
            warned = warn_if_not_finite(source, array)
        return convert_array(array, dtype, source)

    return read_rows


def _row_range(info: TensorInfo, start: int, stop: int) -> TensorInfo:
    """Rows [start, stop) of a stored tensor: a contiguous byte range of its file."""
    row_bytes = (info.end - info.begin) // info.shape[0]
    return dataclasses.replace(info, shape=(stop - start, *info.shape[1:]),
                               begin=info.begin + start * row_bytes,
                               end=info.begin + stop * row_bytes)


def _rows_then(rows: tuple[int, int] | None, transform):
    """``transform`` of the array's rows [start, stop) (just ``transform`` without rows)."""
    if rows is None:
        return transform
    start, stop = rows
    return lambda a: a[start:stop] if transform is None else transform(a[start:stop])


def _checkpoint_layout(checkpoint, info, param: Weight):
    """A transposed parameter in the checkpoint's own [out, in] layout, made on demand:
    an op that reads its weight transposed (FusedMatMul transB=1) then saves the
    checkpoint's bytes as they are (rewrite/checkpoint_layout_matmul.py)."""
    return lambda: _checkpoint_tensor(checkpoint, info, param, None)


def _read(checkpoint: SafetensorsCheckpoint, source: str, rows: tuple[int, int] | None):
    """The checkpoint tensor ``source`` (its rows [start, stop) if given), checked finite."""
    array = checkpoint.read(source)
    if rows is not None:
        array = array[rows[0]:rows[1]]
    warn_if_not_finite(source, array)
    return array


def _loader(checkpoint: SafetensorsCheckpoint, source: str, rows, dtype: ir.DataType, name: str,
            transform):
    def load() -> ir.Tensor:
        array = _read(checkpoint, source, rows)
        if transform is not None:
            array = transform(array)
        return ir.Tensor(convert_array(array, dtype, source), name=name)

    return load


def _filler(checkpoint: SafetensorsCheckpoint, source: str, rows, dtype: ir.DataType,
            transform):
    """What ``_loader`` loads, written into ``out`` (e.g. the mapped data file): a
    transpose or a dtype conversion straight into it, any other transform through
    one temporary array. A transpose between IEEE float types converts as it
    copies (no converted copy of the tensor; 17% faster for f32 -> f16); bfloat16
    goes through float32 as everywhere."""
    def fill(out) -> None:
        array = _read(checkpoint, source, rows)
        if transform is None:
            convert_into(array, out, source)
        elif transform is transpose:
            casts = ml_dtypes.bfloat16 not in (array.dtype, out.dtype)
            transpose(array if casts else convert_array(array, dtype, source), out=out)
            if casts:  # converted as it copied
                check_cast(source, array, out)
        else:
            convert_into(transform(array), out, source)

    return fill
