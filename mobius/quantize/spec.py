"""QuantSpec: what a quantized build asks for, resolved against the EP's capabilities.

Every option left unset takes the EP's default (EpCapabilities), and every
option set is checked against what the EP takes before anything is read, so
an impossible request fails with the alternatives named and nothing written.
"""

from __future__ import annotations

import dataclasses
import difflib
import fnmatch
from collections.abc import Iterable

from mobius.ep.capabilities import EpCapabilities
from mobius.ep.registry import ep_registry
from mobius.errors import MobiusError
from mobius.quantize.calibration import CalibrationText, read_text
from mobius.quantize.rtn import METHODS, MSE

#: --quant values -> bits
QUANT_TYPES = {"int4": 4, "int8": 8}
#: what a --quant-override pattern may keep a layer at
OVERRIDE_KINDS = ("float", "int8", "int4")
#: --quant-method: RTN's range choice (quantize/rtn.py), or ``mixed``: ``mse`` with the
#: tensors int4 hurts most kept at int8 (quantize/sensitive.py)
MIXED = "mixed"
QUANT_METHODS = (*METHODS, MIXED)


@dataclasses.dataclass(frozen=True)
class QuantSpec:
    """A resolved quantization request.

    Attributes:
        bits: 4 or 8 for every Linear not overridden.
        block_size: elements of K per scale.
        symmetric: no zero points (implicit 2**(bits-1)).
        accuracy_level: MatMulNBits accuracy_level (0 unset, 1 f32 ... 4 int8).
        form: EpCapabilities.quant_form.
        lm_head: quantize the lm_head too.
        embedding: quantize the embedding table too (GatherBlockQuantized).
        tied_embedding: quantize a tied embedding matrix once, shared with the
            LM head (where the EP can; see EpCapabilities.quant_tied_embedding).
        overrides: (pattern, "float" | "int8" | "int4") pairs; the first whose
            pattern matches a dotted suffix of a weight's name (".weight"
            stripped) decides its kind.
        method: how RTN chooses each block's range (quantize/rtn.py METHODS), or
            ``mixed`` (quantize/sensitive.py resolves it per graph).
        calibration: token windows whose float activations fit int4/int8 by GPTQ
            (quantize/gptq.py); None: RTN alone.
    """

    bits: int
    block_size: int
    symmetric: bool
    accuracy_level: int
    form: str
    lm_head: bool = True
    embedding: bool = False
    tied_embedding: bool = False
    overrides: tuple[tuple[str, str], ...] = ()
    method: str = MIXED
    calibration: CalibrationText | None = dataclasses.field(default=None, compare=False,
                                                            repr=False)

    @property
    def range_method(self) -> str:
        """RTN's range choice for a block: ``mixed`` ranges its blocks as ``mse``, so a
        weight quantized outside QuantizeLinears' per-graph resolution (a prequantized
        checkpoint's requantized parts) reads the same ranges."""
        return MSE if self.method == MIXED else self.method

    def bits_for(self, name: str) -> int | None:
        """Bits for the weight called ``name`` (None: keep it float)."""
        stem = _stem(name)
        for pattern, kind in self.overrides:
            if _matches(stem, pattern):
                return None if kind == "float" else QUANT_TYPES[kind]
        if not self.lm_head and stem.split(".")[-1] == "lm_head":
            return None
        return self.bits


def _stem(name: str) -> str:
    return name[: -len(".weight")] if name.endswith(".weight") else name


def _matches(stem: str, pattern: str) -> bool:
    return fnmatch.fnmatchcase(stem, pattern) or fnmatch.fnmatchcase(stem, "*." + pattern)


def check_overrides_match(spec: QuantSpec | None, weights: Iterable[str]) -> None:
    """Refuses a --quant-override pattern that matches none of ``weights`` (the model's
    weight names): a typo would otherwise leave the layer quantized without a word.
    The error names the closest layer names."""
    if spec is None or not spec.overrides:
        return
    stems = sorted({_stem(w) for w in weights})
    for pattern, kind in spec.overrides:
        if any(_matches(stem, pattern) for stem in stems):
            continue
        suffixes = {stem.split(".", i)[-1] for stem in stems for i in range(stem.count(".") + 1)}
        suffixes = {s for s in suffixes if not s[0].isdigit()}
        close = difflib.get_close_matches(pattern, sorted(suffixes), n=3, cutoff=0.0)
        raise MobiusError(f"--quant-override {pattern}={kind}: the pattern matches no weight "
                          f"of this model; closest layer names: {', '.join(close)}")


def parse_overrides(text: str | None) -> tuple[tuple[str, str], ...]:
    """'layers.0.*=float,lm_head=int8' -> (('layers.0.*', 'float'), ('lm_head', 'int8'))."""
    if not text:
        return ()
    out = []
    for item in text.split(","):
        pattern, sep, kind = item.strip().partition("=")
        out.append(_checked_override(pattern if sep else "", kind, item.strip()))
    return tuple(out)


def _checked_override(pattern: str, kind: str, written: str) -> tuple[str, str]:
    """(pattern, kind), checked; ``written``: the entry as the user wrote it."""
    if not pattern or kind not in OVERRIDE_KINDS:
        raise MobiusError(f"bad --quant-override entry {written!r}; expected "
                          f"PATTERN=KIND with KIND one of {', '.join(OVERRIDE_KINDS)}")
    return pattern, kind


def resolve_quant(caps: EpCapabilities, quant: str | None, *, block_size: int | None = None,
                  symmetric: bool | None = None, accuracy_level: int | None = None,
                  lm_head: bool | None = None, embedding: bool | None = None,
                  overrides=(), method: str | None = None,
                  calibration: str | None = None,
                  calibration_passes: int | None = None) -> QuantSpec | None:
    """The QuantSpec for ``--quant`` on ``caps`` (None for a float build).

    ``calibration``: the --quant-calibration file, read here only to refuse a
    missing, blank or non-UTF-8 one before anything else is read; the builder
    tokenizes it once it has the checkpoint (QuantSpec.calibration).
    """
    if quant is None:
        given = {"--quant-calibration": calibration is not None,
                 "--quant-calibration-passes": calibration_passes is not None,
                 "--quant-block-size": block_size is not None, "--quant-override": overrides,
                 "--quant-symmetric": symmetric is not None, "--quant-embedding": embedding,
                 "--quant-method": method is not None}
        if any(given.values()):
            flags = ", ".join(flag for flag, set_ in given.items() if set_)
            raise MobiusError(f"quantization options ({flags}) need --quant int4 or int8")
        return None
    if quant not in QUANT_TYPES:
        raise MobiusError(f"unknown --quant {quant!r}; expected one of {', '.join(QUANT_TYPES)}")
    if calibration is not None:
        read_text(calibration)
    elif calibration_passes is not None:
        raise MobiusError("--quant-calibration-passes needs --quant-calibration FILE.txt")
    if method is not None and method not in QUANT_METHODS:
        raise MobiusError(f"--quant-method: unknown method {method!r}; expected one of "
                          f"{', '.join(QUANT_METHODS)}")
    overrides = (parse_overrides(overrides) if isinstance(overrides, str)
                 else tuple(_checked_override(p, k, f"{p}={k}") for p, k in overrides))
    kinds = {QUANT_TYPES[quant]} | {QUANT_TYPES[k] for _, k in overrides if k != "float"}
    for bits in sorted(kinds):
        if bits not in caps.quant_bits:
            takes = " or ".join(f"int{b}" for b in sorted(caps.quant_bits)) or "float weights"
            flag = "--quant" if bits == QUANT_TYPES[quant] else "--quant-override"
            raise MobiusError(f"{flag}: EP {caps.name!r} does not take int{bits} weights; use "
                              f"{takes}, or --ep {_eps_taking(bits)}")
    block = caps.default_quant_block_size if block_size is None else block_size
    if block not in caps.quant_block_sizes:
        sizes = ", ".join(str(b) for b in sorted(caps.quant_block_sizes))
        raise MobiusError(f"--quant-block-size: EP {caps.name!r} does not take quantization "
                          f"block size {block}; use {sizes}")
    sym = caps.default_quant_symmetric if symmetric is None else symmetric
    if not sym and not caps.quant_zero_points:
        raise MobiusError(f"--quant-asymmetric: EP {caps.name!r} takes no zero points; build "
                          f"symmetric")
    level = caps.default_int4_accuracy_level if accuracy_level is None else accuracy_level
    if not 0 <= level <= 4:
        raise MobiusError(f"--quant-accuracy-level: accuracy level must be in 0..4, got {level}")
    return QuantSpec(QUANT_TYPES[quant], block, sym, level, caps.quant_form,
                     caps.quant_lm_head if lm_head is None else lm_head,
                     caps.quant_embedding if embedding is None else embedding,
                     caps.quant_tied_embedding if embedding is None else embedding,
                     tuple(overrides), MIXED if method is None else method)


def _eps_taking(bits: int) -> str:
    return " or ".join(sorted(c.name for c in ep_registry if bits in c.quant_bits))
