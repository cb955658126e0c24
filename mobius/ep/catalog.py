"""The EP table of docs/eps.md, derived from the EP registry and the pipeline's rules.

For each registered EP and each dtype it builds, every rule of the staged
pipeline (mobius/optimize/pipeline.py) is asked whether it applies
(``Rule.applies(RuleContext(caps, dtype, "decoder"))``), so the table shows
exactly what a decoder build for that EP gets -- no hand-kept list to drift.
``./bazelw run //tools:eps_doc`` rewrites the generated section of
docs/eps.md; mobius/ep/catalog_test.py fails when it is stale.
"""

from __future__ import annotations

import onnx_ir as ir

from mobius.ep.capabilities import EpCapabilities
from mobius.ep.registry import ep_registry
from mobius.weights.dtypes import SHORT_NAMES

BEGIN = "<!-- BEGIN GENERATED: EP table (./bazelw run //tools:eps_doc) -->"
END = "<!-- END GENERATED: EP table -->"
_ORDER = (ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16)
#: cleanup/fold passes run for every EP; the table lists what differs between EPs.
_SHOWN_STAGES = ("fuse", "inline", "lower")


def _dtypes(dtypes) -> list[ir.DataType]:
    return [d for d in _ORDER if d in dtypes]


def _names(dtypes) -> str:
    return " ".join(SHORT_NAMES[d] for d in _dtypes(dtypes))


def rules_by_stage(caps: EpCapabilities, role: str = "decoder") -> dict[str, list[str]]:
    """stage -> ["Rule (dtypes)"] for the rules that apply to ``caps`` for some build dtype."""
    from mobius.optimize.pipeline import _stages
    from mobius.rewrite.rule import RuleContext

    built = _dtypes(caps.dtypes)
    out: dict[str, list[str]] = {}
    for stage, rules in _stages():
        if stage not in _SHOWN_STAGES:
            continue
        cells = []
        for rule in rules:
            applies = [d for d in built if rule.applies(RuleContext(caps, d, role))]
            if not applies:
                continue
            suffix = "" if applies == built else f" ({_names(applies)})"
            cells.append(rule.name + suffix)
        out[stage] = cells
    return out


def eps_table() -> list[list[str]]:
    rows = [["EP", "builds", "computes", "fused (decoder)", "inline", "lowered",
             "contrib kernels", "genai provider", "notes"]]
    for caps in ep_registry:
        stages = rules_by_stage(caps)
        if caps.keep_function_bodies:
            inline = "none: custom ops keep their function bodies"
        elif stages["inline"]:
            inline = "custom ops without a kernel"
        else:
            inline = "-"
        notes = []
        if caps.tasks is not None:
            notes.append("tasks: " + ", ".join(sorted(caps.tasks)))
        if caps.use_concrete_dims:
            notes.append("concrete dims")
        if caps.static_context_length:
            notes.append(f"static decoder shapes: {caps.static_context_length} KV slots, "
                         f"{caps.static_chunk} tokens a call")
        if caps.enable_graph_capture:
            notes.append("graph capture")
        if caps.gqa_head_sink:
            notes.append("GQA head_sink (attention sinks)")
        rows.append([
            f"`{caps.name}`",
            _names(caps.dtypes),
            _names(caps.compute_dtypes & caps.dtypes),
            ", ".join(stages["fuse"]) or "-",
            inline,
            ", ".join(stages["lower"]) or "-",
            ", ".join(sorted(caps.contrib_ops)) or "-",
            ", ".join(f"`{name}`" for name in caps.provider_options) or "- (genai: CPU)",
            "; ".join(notes) or "-",
        ])
    return rows


def quant_table() -> list[list[str]]:
    """What `--quant int4|int8` gives per EP, and the defaults of its options."""
    rows = [["EP", "quantized MatMul", "bits", "block sizes", "default block",
             "zero points", "default", "accuracy_level", "lm_head", "embedding"]]
    forms = {"matmul_nbits": "`com.microsoft::MatMulNBits`",
             "dequantize_linear": "blocked `DequantizeLinear` + `MatMul`"}
    for caps in ep_registry:
        if not caps.quant_bits:  # --quant is refused, naming the EPs that take it
            rows.append([f"`{caps.name}`", "none: `--quant` refused"] + ["-"] * 8)
            continue
        form = forms[caps.quant_form]
        if caps.quant_form == "matmul_nbits" and not caps.has_kernel("MatMulNBits"):
            form += (" (kept as a function)" if caps.keep_function_bodies
                     else " (inlined: DequantizeLinear + MatMul)")
        rows.append([
            f"`{caps.name}`", form,
            " ".join(f"int{b}" for b in sorted(caps.quant_bits)),
            " ".join(str(b) for b in sorted(caps.quant_block_sizes)),
            str(caps.default_quant_block_size),
            "yes" if caps.quant_zero_points else "no",
            "symmetric" if caps.default_quant_symmetric else "asymmetric",
            str(caps.default_int4_accuracy_level) if caps.quant_form == "matmul_nbits" else "-",
            "quantized" if caps.quant_lm_head else "float",
            _embedding_form(caps),
        ])
    return rows


def _embedding_form(caps: EpCapabilities) -> str:
    """What --quant-embedding gives (default in parentheses)."""
    if caps.quant_form == "dequantize_linear":
        form = "DequantizeLinear + Gather"
    elif caps.has_kernel("GatherBlockQuantized"):
        form = "GatherBlockQuantized"
        if caps.has_kernel("MatMulNBits"):  # mobius/quantize/emit_tied.py
            form += " (tied, symmetric: one copy shared with the head's MatMulNBits)"
    else:
        form = "GatherBlockQuantized (" + ("function)" if caps.keep_function_bodies else "inlined)")
    default = "on, at the build's bits" if caps.quant_embedding else "off"
    if caps.quant_tied_embedding and not caps.quant_embedding:
        default = "tied: shared with the head, untied: off"
    return f"{form}; default {default}"


def _markdown(rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    return lines + ["| " + " | ".join(row) + " |" for row in rows[1:]]


def eps_markdown_section() -> str:
    lines = [BEGIN, "", *_markdown(eps_table())]
    lines += ["", "Descriptions: " + "; ".join(
        f"`{caps.name}`: {caps.description}" for caps in ep_registry) + "."]
    lines += ["", "Weight quantization (`--quant int4|int8`; every option left out takes "
              "the EP's default below):", "", *_markdown(quant_table()), "", END]
    return "\n".join(lines)


def update_document(text: str) -> str:
    """``text`` with its generated section replaced by the current table."""
    start, end = text.index(BEGIN), text.index(END) + len(END)
    return text[:start] + eps_markdown_section() + text[end:]
