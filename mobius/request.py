"""BuildRequest: what ``mobius.build`` is asked for, grouped by concern.

``mobius.build(model, **options)`` and the CLI take the options flat (``quant_block_size``,
``prefill_logits``, ...); here they are grouped by the part of mobius that owns them,
and each group is checked by that owner, once, before a checkpoint is read:

* the target: EP and dtype (mobius/ep, the EP's capabilities);
* ``quant``: weight quantization (mobius/quantize/spec.resolve_quant, the EP's defaults);
* ``runtime``: the package's client (layout, logits rows, KV size, window cache);
* ``adapters``: PEFT LoRA adapters (merged or separate files).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping, Sequence
from typing import Any

import onnx_ir as ir

from mobius.ep.capabilities import EpCapabilities
from mobius.ep.registry import get_ep
from mobius.errors import MobiusError
from mobius.package.transformers_js import (GENAI, check_layout, client_capabilities,
                                            cross_kv_in_decoder)
from mobius.quantize.spec import QuantSpec, resolve_quant
from mobius.tasks.logits_to_keep import LAST, PREFILL_LOGITS
from mobius.tasks.task import Task
from mobius.weights.dtypes import SHORT_NAMES, parse_dtype

MERGED, SEPARATE = "merged", "separate"
ADAPTER_MODES = (MERGED, SEPARATE)


@dataclasses.dataclass(frozen=True)
class QuantOptions:
    """``--quant`` and its options; None: the EP's default (EpCapabilities)."""

    quant: str | None = None
    block_size: int | None = None
    symmetric: bool | None = None
    accuracy_level: int | None = None
    lm_head: bool | None = None
    embedding: bool | None = None
    override: str | tuple = ()
    method: str | None = None
    calibration: str | None = None
    calibration_passes: int | None = None

    def resolve(self, caps: EpCapabilities) -> QuantSpec | None:
        """The QuantSpec for ``caps`` (None: float weights); a bad option is a MobiusError."""
        return resolve_quant(caps, self.quant, block_size=self.block_size,
                             symmetric=self.symmetric, accuracy_level=self.accuracy_level,
                             lm_head=self.lm_head, embedding=self.embedding,
                             overrides=self.override, method=self.method,
                             calibration=self.calibration,
                             calibration_passes=self.calibration_passes)


@dataclasses.dataclass(frozen=True)
class RuntimeOptions:
    """What the package's client needs: its layout, which logits rows the decoder computes,
    genai's KV size and window-sized KV buffers (mobius/builder._client_options)."""

    layout: str = GENAI
    logits_to_keep: bool | None = None
    prefill_logits: str | None = None
    context_length: int | None = None
    sliding_window_cache: bool = False
    #: the MTP head as genai's speculative drafter (mobius/tasks/mtp.py): every position's logits
    mtp: bool = False

    def check(self, task: Task | None = None) -> None:
        """Rejects a layout that cannot hold ``task``, an unknown ``prefill_logits``, one that
        contradicts ``logits_to_keep``, or "last" for a ``task`` without LM-head logits
        (``task``: once the checkpoint's is known, before any weight is read)."""
        prefill, keep = self.prefill_logits, self.logits_to_keep
        if task is not None:
            check_layout(self.layout, task=task.name)
        if task is not None and prefill == LAST and not task.takes_logits_to_keep:
            raise MobiusError(f"--prefill-logits last: only a causal LM's logits can be "
                              f"limited, not a {task.name} package's")
        if prefill not in (None, *PREFILL_LOGITS):
            raise MobiusError(f"--prefill-logits: unknown prefill logits {prefill!r}; "
                              f"expected {' or '.join(PREFILL_LOGITS)}")
        if self.mtp and (self.layout != GENAI or prefill == LAST or keep):
            raise MobiusError("--mtp: onnxruntime-genai's MtpGenerator verifies drafts with "
                              "every position's logits: use the genai layout without "
                              "--prefill-logits last or --logits-to-keep")
        if prefill == LAST and keep:
            raise MobiusError("--prefill-logits last and --logits-to-keep both choose the "
                              "logits rows: use one (num_logits_to_keep=1 gives the last row)")


@dataclasses.dataclass(frozen=True)
class AdapterOptions:
    """PEFT LoRA adapter folders (``[NAME=]PATH``), merged or written as separate files."""

    paths: tuple[str, ...] = ()
    mode: str = MERGED

    def __post_init__(self):
        if self.mode not in ADAPTER_MODES:
            raise MobiusError(f"adapter mode {self.mode!r}: use {' or '.join(ADAPTER_MODES)}")


@dataclasses.dataclass(frozen=True)
class Target:
    """The checked EP and dtype: the EP as the layout's client sees it."""

    caps: EpCapabilities
    dtype: ir.DataType
    quant: QuantSpec | None
    #: the client's encoder-decoder split (TaskFlags.cross_kv_in_decoder)
    cross_kv_in_decoder: bool = False


@dataclasses.dataclass(frozen=True)
class BuildRequest:
    """One build: the checkpoint and every option, grouped (see the module docstring)."""

    model: str
    execution_provider: str | EpCapabilities = "default"
    dtype: str | ir.DataType = "f32"
    quant: QuantOptions = QuantOptions()
    runtime: RuntimeOptions = RuntimeOptions()
    adapters: AdapterOptions = AdapterOptions()
    trace_optimization: bool = False
    progress: bool = False

    @classmethod
    def from_options(cls, model: str | os.PathLike, **options: Any) -> "BuildRequest":
        """The request for ``mobius.build(model, **options)`` (its flat keyword names)."""
        groups: dict[str, dict[str, Any]] = {"quant": {}, "runtime": {}, "adapters": {}}
        top: dict[str, Any] = {}
        for name, value in options.items():
            group, field = _FLAT_NAMES.get(name, (None, name))
            (groups[group] if group else top)[field] = value
        if "calibration" in groups["quant"] and groups["quant"]["calibration"] is not None:
            groups["quant"]["calibration"] = os.fspath(groups["quant"]["calibration"])
        if "paths" in groups["adapters"]:
            groups["adapters"]["paths"] = _adapter_paths(groups["adapters"]["paths"])
        return cls(model=os.fspath(model), quant=QuantOptions(**groups["quant"]),
                   runtime=RuntimeOptions(**groups["runtime"]),
                   adapters=AdapterOptions(**groups["adapters"]), **top)

    def target(self) -> Target:
        """Everything that needs no checkpoint (EP, dtype, layout, quantization), checked
        before anything is downloaded or read."""
        self.runtime.check()
        caps = get_ep(self.execution_provider)
        dtype = parse_dtype(self.dtype)
        check_supported(caps, dtype)
        quant = self.quant.resolve(caps)
        check_layout(self.runtime.layout, SHORT_NAMES[dtype], quant=self.quant.quant,
                     logits_to_keep=self.runtime.logits_to_keep)
        layout = self.runtime.layout
        return Target(client_capabilities(caps, layout), dtype, quant,
                      cross_kv_in_decoder(layout))


def check_supported(caps: EpCapabilities, dtype: ir.DataType, task: Task | None = None,
                    family: str | None = None) -> None:
    """Rejects (EP, dtype) and (EP, task) pairs the EP cannot run, before any work."""
    if dtype not in caps.dtypes:
        names = ", ".join(sorted(SHORT_NAMES[d] for d in caps.dtypes))
        raise MobiusError(f"EP {caps.name!r} does not support {SHORT_NAMES[dtype]}; "
                          f"build with --dtype {names.replace(', ', ' or ')}")
    if task is not None and caps.tasks is not None and task.name not in caps.tasks:
        what = f"{family} is a {task.name!r} model" if family else f"this is a {task.name!r} model"
        raise MobiusError(f"EP {caps.name!r} only runs {', '.join(sorted(caps.tasks))} models "
                          f"and {what}; use --ep default or cpu")


def _adapter_paths(adapter: str | os.PathLike | Sequence | None) -> tuple[str, ...]:
    items = [adapter] if isinstance(adapter, (str, os.PathLike)) else adapter or ()
    return tuple(os.fspath(a) for a in items)


#: mobius.build's flat keyword -> (group, field)
_FLAT_NAMES: Mapping[str, tuple[str, str]] = {
    **{f"quant_{f}": ("quant", f) for f in ("block_size", "symmetric", "accuracy_level",
                                            "lm_head", "embedding", "override", "method",
                                            "calibration", "calibration_passes")},
    "quant": ("quant", "quant"),
    **{f: ("runtime", f) for f in ("layout", "logits_to_keep", "prefill_logits",
                                   "context_length", "sliding_window_cache", "mtp")},
    "adapter": ("adapters", "paths"),
    "adapter_mode": ("adapters", "mode"),
}
