"""EpCapabilities: everything the pipeline may know about an execution provider.

Legality is declared here as data, in the style of MLIR conversion targets:
rewrite rules ask "does the target support X for this dtype?", never
"is the target cuda?". Adding an EP is one instance of this class.
"""

from __future__ import annotations

import dataclasses
import types
from typing import Any, Callable, Mapping

import onnx_ir as ir

from mobius.ep.contrib_ops import GATHER_BLOCK_QUANTIZED

FLOAT_DTYPES = frozenset({ir.DataType.FLOAT, ir.DataType.FLOAT16, ir.DataType.BFLOAT16})
#: what the EPs whose kernels compute every float type natively (GPU runtimes) declare
F32_F16 = frozenset({ir.DataType.FLOAT, ir.DataType.FLOAT16})
#: quantized MatMul forms (EpCapabilities.quant_form)
QUANT_FORMS = ("matmul_nbits", "dequantize_linear")


@dataclasses.dataclass(frozen=True)
class EpCapabilities:
    """A declarative description of one EP.

    Attributes:
        name: registry key (what ``--ep`` takes).
        dtypes: build dtypes the EP accepts (others are rejected before building).
        compute_dtypes: dtypes its kernels compute in; a build dtype outside
            this set (bf16 on CPU) is stored in that dtype but computed in f32.
        tasks: tasks the EP's runtime serves (None: every task).
        gqa_dtypes: dtypes for which attention is fused into GroupQueryAttention.
        qkv_pack_dtypes: dtypes for which Q/K/V projections are packed into one MatMul.
        mha_dtypes: dtypes for which bidirectional attention outside decoders
            (encoders, vision towers) fuses into com.microsoft MultiHeadAttention.
        supports_fused_rope: GQA may absorb RoPE (``do_rotary=1``).
        gqa_sliding_window_cache: GQA keeps a sliding-window layer's cache
            window-sized (``sliding_window_cache=1``) while reading mobius's
            absolute-column attention_bias (onnxruntime's CPU kernel does; CUDA
            rejects attention_bias there).
        gqa_head_sink: the GQA kernel takes per-head sink logits (its ``head_sink``
            input, gpt-oss); else attention with sinks stays standard Attention
            (meaningless without gqa_dtypes, and then ignored).
        supports_skip_layer_norm: Skip(Simplified)LayerNormalization kernels exist.
        moe_dtypes: dtypes for which the sparse-MoE routing fuses into com.microsoft
            MoE (the dtypes its kernel takes; QMoE replaces it in quantized builds
            where the EP has that kernel too).
        supports_if / supports_shape / supports_int64: graph-level constraints.
        supports_pad_axes: Pad's ``axes`` input (opset 18) is taken (else the pads are
            spelled out for every axis).
        supports_scatter_reduction: ScatterND's ``reduction`` attribute is taken (else
            the MoE combine's unique-index scatter-add becomes a plain ScatterND).
        supports_rank_broadcast: And takes inputs of different ranks (else the
            lower-rank one is given leading 1s by Unsqueeze,
            mobius/rewrite/equal_rank_broadcast.py).
        prepacks_2d_weights: the EP copies a constant 2-D MatMul/Gemm weight into
            its own packed layout at session load (a weight another node also
            reads is then held twice; any is held twice while it is packed).
        default_int4_accuracy_level: MatMulNBits accuracy_level for quantized
            builds (int4 and int8) unless --quant-accuracy-level says otherwise.
        quant_form: the quantized MatMul form (BP-16): "matmul_nbits"
            (com.microsoft MatMulNBits, body inlined where the kernel is
            missing) or "dequantize_linear" (standard blocked DequantizeLinear).
        quant_bits: weight bit widths the EP's quantized MatMul takes.
        quant_block_sizes: block sizes it takes (BP-17); powers of two.
        default_quant_block_size: block size when none is asked for (BP-20).
        quant_zero_points: whether asymmetric (zero-point) weights are taken (BP-18).
        default_quant_symmetric: symmetric unless asked otherwise.
        quant_lm_head: whether the lm_head is quantized by default.
        quant_embedding: whether the token embedding table is quantized by
            default, at the build's bits (GatherBlockQuantized; only where the EP
            has the kernel: elsewhere the lookup would dequantize the whole table
            every step). int4 costs SmolLM2 +0.016 nats of KL against the body's
            0.68 and makes an untied 200M Llama 126 MB instead of 237 MB
            (docs/benchmarks.md, "Package size").
        quant_tied_embedding: whether a tied embedding matrix is, by default,
            quantized once and shared with the quantized LM head (where the EP
            has GatherBlockQuantized and MatMulNBits; mobius/quantize/emit_tied.py).
            Without it an int4 package of a tied model ships the float table
            beside the head's int4 copy: llama3.2-1b 1.82 GB instead of 0.77 GB.
        ort_provider: the onnxruntime session provider that runs the EP's packages
            (e.g. "CUDAExecutionProvider"; CPU-runnable targets name the CPU
            provider); None where no onnxruntime provider runs them (MLX).
        provider_options: onnxruntime-genai provider name -> option dict.
        enable_graph_capture: genai/ORT graph capture (CUDA graphs etc.).
        graph_capture_option: the provider option by which onnxruntime-genai turns
            graph capture on for the EP's provider ("enable_cuda_graph", ...); None
            where it has none (mobius/package/provider_options.py).
        graph_capture_by_default: genai captures unless that option is "0" (DML).
        contrib_ops: com.microsoft ops the EP has kernels for; a mobius-emitted
            custom op outside this set is inlined to its standard-op body.
        expand_standard_ops: standard ONNX ops the EP has no kernel for (opset-23
            RMSNormalization, RotaryEmbedding, Attention on OpenVINO); each is replaced
            by its ONNX function body (mobius/rewrite/expand_standard_ops.py).
        precision_options: provider options that make the EP compute in the build's
            dtype, per (build dtype, quantized); merged into every provider of
            provider_options in genai_config (OpenVINO's CPU plugin otherwise picks
            bf16 where the CPU has AMX, and quantizes int4 activations to int8).
        keep_function_bodies: leave custom ops the EP lacks as local functions
            (portable "default" target) instead of inlining them.
        use_concrete_dims: build-time task flag (runtimes without dynamic shapes).
        static_context_length: decoders get static graph I/O (NPUs compile one shape):
            batch 1, ``static_chunk`` new tokens per call, a KV cache of this many slots
            in all (past = context - chunk); 0 keeps dynamic shapes
            (mobius/rewrite/static_shapes.py).
        static_chunk: tokens per call of a static decoder (the prefill chunk; a decode
            step fills one slot of it and masks the rest).
        description: one line for `mobius list eps`.
    """

    name: str
    dtypes: frozenset = FLOAT_DTYPES
    compute_dtypes: frozenset = FLOAT_DTYPES
    tasks: frozenset | None = None
    gqa_dtypes: frozenset = frozenset()
    qkv_pack_dtypes: frozenset = frozenset()
    mha_dtypes: frozenset = frozenset()
    supports_fused_rope: bool = False
    gqa_sliding_window_cache: bool = False
    gqa_head_sink: bool = False
    supports_skip_layer_norm: bool = False
    moe_dtypes: frozenset = frozenset()
    supports_if: bool = True
    supports_shape: bool = True
    supports_int64: bool = True
    supports_pad_axes: bool = True
    supports_scatter_reduction: bool = True
    supports_rank_broadcast: bool = True
    prepacks_2d_weights: bool = False
    default_int4_accuracy_level: int = 0
    quant_form: str = "matmul_nbits"
    quant_bits: frozenset = frozenset({4, 8})
    quant_block_sizes: frozenset = frozenset({16, 32, 64, 128, 256})
    default_quant_block_size: int = 32
    quant_zero_points: bool = True
    default_quant_symmetric: bool = True
    quant_lm_head: bool = True
    quant_embedding: bool = False
    quant_tied_embedding: bool = False
    ort_provider: str | None = None
    provider_options: Mapping[str, Mapping[str, Any]] = dataclasses.field(
        default_factory=lambda: types.MappingProxyType({})
    )
    enable_graph_capture: bool = False
    graph_capture_option: str | None = None
    graph_capture_by_default: bool = False
    contrib_ops: frozenset = frozenset()
    expand_standard_ops: frozenset = frozenset()
    precision_options: Callable[[ir.DataType, bool], Mapping[str, str]] | None = None
    keep_function_bodies: bool = False
    use_concrete_dims: bool = False
    static_context_length: int = 0
    static_chunk: int = 0
    description: str = ""

    def __post_init__(self) -> None:
        if not self.name or not isinstance(self.name, str):
            raise ValueError("EpCapabilities.name must be a non-empty string")
        for field in ("dtypes", "compute_dtypes", "gqa_dtypes", "qkv_pack_dtypes", "mha_dtypes",
                      "moe_dtypes", "contrib_ops", "expand_standard_ops",
                      "quant_bits", "quant_block_sizes"):
            object.__setattr__(self, field, frozenset(getattr(self, field)))
        object.__setattr__(
            self, "provider_options",
            types.MappingProxyType({k: types.MappingProxyType(dict(v))
                                    for k, v in dict(self.provider_options).items()}),
        )
        if self.tasks is not None:
            object.__setattr__(self, "tasks", frozenset(self.tasks))
        if ir.DataType.FLOAT not in self.compute_dtypes:
            raise ValueError(f"EP {self.name!r}: compute_dtypes must include FLOAT (the fallback)")
        if self.gqa_dtypes - self.compute_dtypes:
            raise ValueError(f"EP {self.name!r}: GQA dtypes must be computed natively")
        bad = (self.dtypes | self.compute_dtypes | self.gqa_dtypes | self.qkv_pack_dtypes) - FLOAT_DTYPES
        if bad:
            raise ValueError(f"EP {self.name!r}: GQA/QKV dtypes must be float types, got {bad}")
        if self.gqa_dtypes and "GroupQueryAttention" not in self.contrib_ops:
            raise ValueError(
                f"EP {self.name!r}: gqa_dtypes is set but GroupQueryAttention is not in contrib_ops"
            )
        if self.mha_dtypes and "MultiHeadAttention" not in self.contrib_ops:
            raise ValueError(
                f"EP {self.name!r}: mha_dtypes is set but MultiHeadAttention is not in contrib_ops"
            )
        if self.mha_dtypes - self.compute_dtypes:
            raise ValueError(f"EP {self.name!r}: MultiHeadAttention dtypes must be computed natively")
        if self.moe_dtypes and "MoE" not in self.contrib_ops:
            raise ValueError(f"EP {self.name!r}: moe_dtypes is set but MoE is not in contrib_ops")
        if self.moe_dtypes - self.compute_dtypes:
            raise ValueError(f"EP {self.name!r}: MoE dtypes must be computed natively")
        if self.supports_skip_layer_norm and not {
            "SkipLayerNormalization", "SkipSimplifiedLayerNormalization"
        } <= self.contrib_ops:
            raise ValueError(
                f"EP {self.name!r}: supports_skip_layer_norm needs the Skip*LayerNormalization contrib ops"
            )
        if self.qkv_pack_dtypes - self.gqa_dtypes:
            raise ValueError(
                f"EP {self.name!r}: QKV packing is only defined for dtypes where GQA is fused"
            )
        if not 0 <= self.default_int4_accuracy_level <= 4:
            raise ValueError(f"EP {self.name!r}: default_int4_accuracy_level must be in 0..4")
        self._check_quantization()
        if (self.static_chunk or self.static_context_length) and not (
                0 < self.static_chunk < self.static_context_length):
            raise ValueError(f"EP {self.name!r}: static shapes need 0 < static_chunk < "
                             f"static_context_length (or both 0)")
        if self.enable_graph_capture and not self.graph_capture_option:
            raise ValueError(f"EP {self.name!r}: graph capture needs the provider option that "
                             f"turns it on (graph_capture_option)")
        if (self.graph_capture_option or self.graph_capture_by_default) and len(
                self.provider_options) != 1:
            raise ValueError(f"EP {self.name!r}: a graph capture option belongs to one "
                             f"onnxruntime-genai provider (provider_options)")
        if self.ort_provider is not None and not str(self.ort_provider).endswith(
                "ExecutionProvider"):
            raise ValueError(f"EP {self.name!r}: ort_provider {self.ort_provider!r} is not an "
                             "onnxruntime provider name (…ExecutionProvider)")

    def _check_quantization(self) -> None:
        if self.quant_form not in QUANT_FORMS:
            raise ValueError(f"EP {self.name!r}: quant_form must be one of {', '.join(QUANT_FORMS)}")
        if self.quant_form == "matmul_nbits" and self.quant_bits - {4, 8}:
            raise ValueError(f"EP {self.name!r}: MatMulNBits takes 4 or 8 bits")
        if any(b < 16 or b > 256 or b & (b - 1) for b in self.quant_block_sizes):
            raise ValueError(f"EP {self.name!r}: quant_block_sizes must be powers of two in 16..256")
        if self.default_quant_block_size not in self.quant_block_sizes:
            raise ValueError(f"EP {self.name!r}: default_quant_block_size is not in quant_block_sizes")
        if not self.default_quant_symmetric and not self.quant_zero_points:
            raise ValueError(f"EP {self.name!r}: asymmetric default needs quant_zero_points")
        if self.quant_embedding and not self.has_kernel(GATHER_BLOCK_QUANTIZED):
            raise ValueError(f"EP {self.name!r}: quant_embedding needs the "
                             f"{GATHER_BLOCK_QUANTIZED} kernel in contrib_ops")

    @property
    def primary_dtype(self) -> ir.DataType:
        """The dtype the EP's packages are deployed in: f16 where it runs GQA in f16 (the GPU
        runtimes), else f32. The zoo builds it and the golden snapshots are taken in it."""
        return ir.DataType.FLOAT16 if ir.DataType.FLOAT16 in self.gqa_dtypes else ir.DataType.FLOAT

    def computes(self, dtype: ir.DataType) -> bool:
        """Whether ``dtype`` is computed natively (else stored only, computed in f32)."""
        return dtype in self.compute_dtypes

    def fuses_gqa(self, dtype: ir.DataType) -> bool:
        return dtype in self.gqa_dtypes

    def packs_qkv(self, dtype: ir.DataType) -> bool:
        return dtype in self.qkv_pack_dtypes

    def fuses_mha(self, dtype: ir.DataType) -> bool:
        return dtype in self.mha_dtypes

    def fuses_moe(self, dtype: ir.DataType) -> bool:
        return dtype in self.moe_dtypes

    def has_kernel(self, op_type: str) -> bool:
        """Whether a com.microsoft op runs natively (else its function body is used)."""
        return op_type in self.contrib_ops

    def provider_options_for(self, dtype: ir.DataType, quantized: bool) -> dict[str, dict[str, Any]]:
        """provider_options with the precision options of a (dtype, quantized) build merged in."""
        extra = dict(self.precision_options(dtype, quantized)) if self.precision_options else {}
        return {name: {**options, **extra} for name, options in self.provider_options.items()}

    def summary(self) -> dict[str, Any]:
        """A plain dict for `mobius list eps` and docs."""
        out = {}
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if isinstance(value, frozenset):  # dtypes, op names
                value = sorted(v.name if isinstance(v, ir.DataType) else str(v) for v in value)
            elif isinstance(value, Mapping):
                value = {k: dict(v) for k, v in value.items()}
            elif callable(value):  # precision_options: shown for the float builds
                value = {d.name: dict(value(d, False)) for d in sorted(self.dtypes, key=str)}
            out[field.name] = value
        return out
