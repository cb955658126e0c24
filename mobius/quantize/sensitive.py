"""The ``mixed`` int4 method: the tensors int4 hurts most kept at int8, chosen without data.

Quantizing one tensor kind at a time (docs/quantization.md, "mixed") showed
where int4's loss comes from: on all-MiniLM-L6-v2 the attention value
projections and the feed-forward projections lose the most; on SmolLM2 the
value and down projections. llama.cpp's Q4_K_M recipe keeps the same kinds
wider (attn_v, ffn_down). This rule does likewise, by the role a weight's
name gives it (the checkpoint names every family already uses):

- every attention value projection (``v_proj``, ``value``) at int8: GQA
  makes them small (a few % of the weights);
- the feed-forward down projection (``down_proj``, ``fc2``, ``mlp.c_proj``,
  ``dense_4h_to_h``, BERT's ``layer.N.output.dense``) at int8 in the layers
  Q4_K_M widens: the first and last eighth of the stack and every third
  layer between, about half, so an untied int4 package stays within the
  size target (docs/benchmarks.md, "Package size").

Everything else keeps int4 with ``mse`` ranges. The rule becomes overrides
appended after the user's (``--quant-override`` still wins), resolved once
per graph from its weight names, so every later step reads a plain QuantSpec.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable

from mobius.ep.capabilities import EpCapabilities
from mobius.quantize.rtn import MSE
from mobius.quantize.spec import MIXED, QuantSpec

_VALUE = re.compile(r"(?:^|\.)(?:v_proj|value)$")
_DOWN = re.compile(r"(?:^|\.)(?:down_proj|fc2|mlp\.c_proj|dense_4h_to_h|layer\.\d+\.output\.dense)$")
_LAYER = re.compile(r"\.(\d+)\.")
WIDE_BITS = "int8"


def resolve_mixed(spec: QuantSpec | None, weights: Iterable[str],
                  caps: EpCapabilities) -> QuantSpec | None:
    """``spec`` with the ``mixed`` method spelled out for the graph whose float matrices are
    ``weights`` (names; a fused MoE's 3-D experts are not among them, nor counted as
    layers): MSE ranges plus int8 overrides where ``caps`` takes int8
    weights (trt-rtx takes int4 only: there it is ``mse``); any other spec unchanged."""
    if spec is None or spec.method != MIXED:
        return spec
    extra = wide_weights(weights) if spec.bits == 4 and 8 in caps.quant_bits else ()
    return dataclasses.replace(spec, method=MSE,
                               overrides=spec.overrides + tuple((s, WIDE_BITS) for s in extra))


def wide_weights(weights: Iterable[str]) -> tuple[str, ...]:
    """Stems (".weight" stripped) of the weights the rule keeps at int8, sorted."""
    stems = {w[: -len(".weight")] if w.endswith(".weight") else w for w in weights}
    downs = [s for s in stems if _DOWN.search(s) and _LAYER.search(s)]
    layers: dict[str, int] = {}  # stack (name before the layer index) -> its layer count
    for stem in downs:
        prefix, index = _stack(stem)
        layers[prefix] = max(layers.get(prefix, 0), index + 1)
    wide = {s for s in stems if _VALUE.search(s)}
    wide |= {s for s in downs if more_bits(_stack(s)[1], layers[_stack(s)[0]])}
    return tuple(sorted(wide))


def _stack(stem: str) -> tuple[str, int]:
    match = _LAYER.search(stem)
    return stem[: match.start()], int(match.group(1))


def more_bits(layer: int, layers: int) -> bool:
    """Q4_K_M's choice of layers: the first and last eighth, and every third between."""
    eighth = layers // 8
    return layer < eighth or layer >= 7 * layers // 8 or (layer - eighth) % 3 == 2
