"""qnn: onnxruntime's QNN EP on Qualcomm's HTP (Hexagon NPU) backend.

Measured on onnxruntime-qnn 2.7.0 (QNN SDK 2.51), a plugin EP library for the pinned
onnxruntime, whose libQnnHtp.so runs here as an x86-64 simulator of the HTP
(testing/qnn_backend.py; docs/eps.md, "QNN"). The HTP compiles one graph per shape:
a decoder with dynamic dims gave it only 2 integer subgraphs ("Cannot get shape"),
the same graph with every dim fixed (batch 1, a fixed chunk of new tokens, a fixed
past) ran whole as one QNN node. So decoders are built static (StaticShapes): a KV
cache of ``static_context_length`` slots, ``static_chunk`` tokens per call. The HTP
computes float in fp16 (``enable_htp_fp16_precision``, which it accepts only with a
``soc_model``); it has no kernel for the com.microsoft ops mobius emits, so they are
inlined. Quantized weights are refused: MatMulNBits with a K the block does not
divide, and per-channel DequantizeLinear on its own, were not taken by the HTP.
Only text generation is served: StaticShapes fixes a decoder's dims, while an encoder,
a vision tower or a VLM's embedding graph would keep dynamic ones, which the HTP does
not take (a BERT with dynamic dims: 0 nodes on QNN), so those tasks are refused up front.
"""

from mobius.ep.capabilities import F32_F16, EpCapabilities

CAPABILITIES = EpCapabilities(
    name="qnn",
    tasks={"text-generation"},
    dtypes=F32_F16,
    compute_dtypes=F32_F16,
    quant_bits=frozenset(),
    static_context_length=256,
    static_chunk=8,
    # soc_model 60 / htp_arch 73: Snapdragon 8 Gen 3's Hexagon v73, which the simulator models
    provider_options={"QNN": {"backend_type": "htp", "enable_htp_fp16_precision": "1",
                              "soc_model": "60", "htp_arch": "73"}},
    ort_provider="QNNExecutionProvider",
    description="QNN EP (onnxruntime-qnn), HTP backend; static-shape decoders",
)
