"""config.json contents of the built-in tiny models.

Dimensions are tiny but distinct from each other (and the vocabulary size
from everything else) so that a transposed or swapped weight cannot pass a
test by accident. head_dim is 16 so fused attention kernels with rotary
(which need head_size % 16 == 0 on CPU) apply.
"""

VOCAB_SIZE = 1031

_COMMON = {
    "vocab_size": VOCAB_SIZE,
    "hidden_size": 64,
    "intermediate_size": 172,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 256,
    "rms_norm_eps": 1e-6,
    "hidden_act": "silu",
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 0,
    "tie_word_embeddings": False,
    "rope_theta": 10000.0,
}

TINY_PRESETS_GEMMA3 = {
    **_COMMON, "model_type": "gemma3_text", "architectures": ["Gemma3ForCausalLM"],
    "head_dim": 16, "hidden_activation": "gelu_pytorch_tanh", "tie_word_embeddings": True,
    "query_pre_attn_scalar": 24, "sliding_window": 6,
    "layer_types": ["sliding_attention", "full_attention"],
    "rope_parameters": {"sliding_attention": {"rope_type": "default", "rope_theta": 10000.0},
                        "full_attention": {"rope_type": "default", "rope_theta": 1000000.0}},
}

TINY_PRESETS: dict[str, dict] = {
    "tiny-llama": {**_COMMON, "model_type": "llama", "architectures": ["LlamaForCausalLM"]},
    "tiny-mistral": {
        **_COMMON,
        "model_type": "mistral",
        "architectures": ["MistralForCausalLM"],
        "sliding_window": 8,
    },
    "tiny-qwen2": {
        **_COMMON,
        "model_type": "qwen2",
        "architectures": ["Qwen2ForCausalLM"],
        "tie_word_embeddings": True,
        "use_sliding_window": False,
    },
    "tiny-qwen3": {
        **_COMMON,
        "model_type": "qwen3",
        "architectures": ["Qwen3ForCausalLM"],
        "head_dim": 32,
        "tie_word_embeddings": True,
    },
    # MoE: expert sizes, expert counts and hidden sizes differ from every other dim.
    "tiny-mixtral": {**_COMMON, "model_type": "mixtral", "architectures": ["MixtralForCausalLM"],
                     "intermediate_size": 88, "num_local_experts": 4, "num_experts_per_tok": 2},
    "tiny-qwen3-moe": {
        **_COMMON, "model_type": "qwen3_moe", "architectures": ["Qwen3MoeForCausalLM"],
        "hidden_size": 80, "head_dim": 16, "moe_intermediate_size": 40, "num_experts": 6,
        "num_experts_per_tok": 2, "norm_topk_prob": False, "mlp_only_layers": [1],
        "tie_word_embeddings": True,
    },
    "tiny-qwen2-moe": {
        **_COMMON, "model_type": "qwen2_moe", "architectures": ["Qwen2MoeForCausalLM"],
        "hidden_size": 48, "head_dim": 16, "moe_intermediate_size": 36, "num_experts": 5,
        "num_experts_per_tok": 3, "norm_topk_prob": True, "shared_expert_intermediate_size": 52,
        "decoder_sparse_step": 1, "use_sliding_window": False,
    },
    "tiny-olmoe": {
        **_COMMON, "model_type": "olmoe", "architectures": ["OlmoeForCausalLM"],
        "intermediate_size": 44, "num_experts": 5, "num_experts_per_tok": 2,
        "norm_topk_prob": False, "rms_norm_eps": 1e-5, "clip_qkv": None,
    },
    "tiny-granitemoe": {
        **_COMMON, "model_type": "granitemoe", "architectures": ["GraniteMoeForCausalLM"],
        "intermediate_size": 36, "num_local_experts": 6, "num_experts_per_tok": 2,
        "embedding_multiplier": 12.0, "residual_multiplier": 0.22,
        "attention_multiplier": 0.0078125, "logits_scaling": 8.0,
    },
    # Mamba2 + attention hybrid: 8 Mamba heads of 16 in 2 groups, state 12, conv 4;
    # NoPE attention (Granite 4.0-H), 4 experts of 36 + a shared MLP of 52.
    "tiny-granitemoehybrid": {
        **_COMMON, "model_type": "granitemoehybrid",
        "architectures": ["GraniteMoeHybridForCausalLM"], "num_hidden_layers": 3,
        "layer_types": ["linear_attention", "full_attention", "linear_attention"],
        "intermediate_size": 36, "shared_intermediate_size": 52, "num_local_experts": 4,
        "num_experts_per_tok": 2, "mamba_n_heads": 8, "mamba_d_head": 16, "mamba_n_groups": 2,
        "mamba_d_state": 12, "mamba_d_conv": 4, "mamba_expand": 2, "mamba_chunk_size": 256,
        "mamba_conv_bias": True, "mamba_proj_bias": False, "position_embedding_type": "nope",
        "embedding_multiplier": 12.0, "residual_multiplier": 0.22,
        "attention_multiplier": 0.0078125, "logits_scaling": 8.0,
    },
    "tiny-phimoe": {
        **_COMMON, "model_type": "phimoe", "architectures": ["PhimoeForCausalLM"],
        "intermediate_size": 52, "num_local_experts": 5, "num_experts_per_tok": 2,
        # SparseMixer drops experts whose score is more than 2 * router_jitter_noise
        # below the best: a discontinuity where two f16 graphs that round in a
        # different order keep different experts for a token at the cut (0.03
        # logits apart at 0.01). The preset keeps the cut out of the way so EP-vs-
        # generic f16 parity measures the graphs; the cut itself is tested in f32
        # (sparse_moe_families_test: router_jitter_noise 0.4).
        "rms_norm_eps": 1e-5, "router_jitter_noise": 10.0, "input_jitter_noise": 0.01,
        "attention_bias": True, "lm_head_bias": True, "sliding_window": None,
    },
    # MLA: cache head = qk_rope_head_dim + kv_lora_rank = 32 (V2) / 48 (V3); every
    # latent, head and expert size distinct. V2-Lite-like: no q LoRA, greedy routing.
    "tiny-deepseek-v2": {
        **_COMMON, "model_type": "deepseek_v2", "architectures": ["DeepseekV2ForCausalLM"],
        "num_key_value_heads": 4, "q_lora_rank": None, "kv_lora_rank": 24,
        "qk_nope_head_dim": 12, "qk_rope_head_dim": 8, "v_head_dim": 20,
        "first_k_dense_replace": 1, "moe_intermediate_size": 28, "n_routed_experts": 8,
        "num_experts_per_tok": 2, "n_shared_experts": 2, "topk_method": "greedy",
        "n_group": 4, "topk_group": 2, "routed_scaling_factor": 1.0, "norm_topk_prob": False,
    },
    # V3-like: q LoRA, sigmoid + correction bias + group-limited (noaux_tc) routing.
    "tiny-deepseek-v3": {
        **_COMMON, "model_type": "deepseek_v3", "architectures": ["DeepseekV3ForCausalLM"],
        "num_key_value_heads": 4, "q_lora_rank": 36, "kv_lora_rank": 40,
        "qk_nope_head_dim": 12, "qk_rope_head_dim": 8, "v_head_dim": 20,
        "first_k_dense_replace": 1, "moe_intermediate_size": 28, "n_routed_experts": 8,
        "num_experts_per_tok": 3, "n_shared_experts": 1, "n_group": 4, "topk_group": 2,
        "routed_scaling_factor": 2.5, "norm_topk_prob": True, "rope_interleave": True,
        "num_nextn_predict_layers": 0,
    },
    # hybrid: conv, attention, conv layers; the MLP width is 2/3 of 172 times 1.5, rounded
    # up to a multiple of 12 (= 180). No conv biases, as released LFM2s: a left-padded row
    # then equals the row alone (transformers zeroes the padding's conv input, a bias is
    # not zeroed); lfm2_families_test.py covers conv_bias.
    "tiny-lfm2": {
        **_COMMON, "model_type": "lfm2", "architectures": ["Lfm2ForCausalLM"],
        "num_hidden_layers": 3, "full_attn_idxs": [1], "conv_L_cache": 3, "conv_bias": False,
        "block_auto_adjust_ff_dim": True, "block_ffn_dim_multiplier": 1.5,
        "block_multiple_of": 12, "norm_eps": 1e-5,
    },
    # LFM2-MoE: a dense first layer (intermediate_size as written), then 6 experts of 28,
    # top-2 chosen on sigmoid + expert_bias, renormalized, scaled by 1.5.
    "tiny-lfm2-moe": {
        **_COMMON, "model_type": "lfm2_moe", "architectures": ["Lfm2MoeForCausalLM"],
        "num_hidden_layers": 3, "layer_types": ["conv", "full_attention", "conv"],
        "conv_L_cache": 3, "conv_bias": False, "norm_eps": 1e-5, "num_dense_layers": 1,
        "num_experts": 6, "num_experts_per_tok": 2, "moe_intermediate_size": 28,
        "use_expert_bias": True, "routed_scaling_factor": 1.5, "norm_topk_prob": True,
    },
    "tiny-gpt_oss": {
        **_COMMON, "model_type": "gpt_oss", "architectures": ["GptOssForCausalLM"],
        "head_dim": 16, "intermediate_size": 96, "num_local_experts": 5, "num_experts_per_tok": 2,
        "rms_norm_eps": 1e-5, "attention_bias": True, "sliding_window": 4,
        "layer_types": ["sliding_attention", "full_attention"], "swiglu_limit": 7.0,
        "swiglu_alpha": 1.702, "rope_theta": 150000.0, "rope_parameters": {
            "rope_type": "yarn", "rope_theta": 150000.0, "factor": 4.0, "beta_fast": 32.0,
            "beta_slow": 1.0, "truncate": False, "original_max_position_embeddings": 64},
    },
    "tiny-gemma": {**_COMMON, "model_type": "gemma", "architectures": ["GemmaForCausalLM"],
                   "head_dim": 16, "hidden_act": "gelu_pytorch_tanh", "tie_word_embeddings": True},
    "tiny-gemma2": {
        **_COMMON, "model_type": "gemma2", "architectures": ["Gemma2ForCausalLM"],
        "head_dim": 16, "hidden_activation": "gelu_pytorch_tanh", "tie_word_embeddings": True,
        "query_pre_attn_scalar": 24, "sliding_window": 6, "attn_logit_softcapping": 50.0,
        "final_logit_softcapping": 30.0, "layer_types": ["sliding_attention", "full_attention"],
    },
    "tiny-gemma3": TINY_PRESETS_GEMMA3,
    "tiny-granite": {
        **_COMMON, "model_type": "granite", "architectures": ["GraniteForCausalLM"],
        "embedding_multiplier": 12.0, "residual_multiplier": 0.22, "attention_multiplier": 0.0078125,
        "logits_scaling": 8.0,
    },
    "tiny-olmo2": {**_COMMON, "model_type": "olmo2", "architectures": ["Olmo2ForCausalLM"],
                   "rms_norm_eps": 1e-5},
    "tiny-olmo": {**_COMMON, "model_type": "olmo", "architectures": ["OlmoForCausalLM"],
                  "attention_bias": True, "clip_qkv": 0.1},
    "tiny-starcoder2": {**_COMMON, "model_type": "starcoder2",
                        "architectures": ["Starcoder2ForCausalLM"], "hidden_act": "gelu_pytorch_tanh",
                        "norm_epsilon": 1e-5, "use_bias": True, "tie_word_embeddings": True},
    "tiny-stablelm": {**_COMMON, "model_type": "stablelm", "architectures": ["StableLmForCausalLM"],
                      "layer_norm_eps": 1e-5, "use_qkv_bias": True, "qk_layernorm": True,
                      "partial_rotary_factor": 0.25},
    "tiny-cohere": {**_COMMON, "model_type": "cohere", "architectures": ["CohereForCausalLM"],
                    "layer_norm_eps": 1e-5, "logit_scale": 0.25, "use_qk_norm": True,
                    "tie_word_embeddings": True},
    "tiny-cohere2": {**_COMMON, "model_type": "cohere2", "architectures": ["Cohere2ForCausalLM"],
                     "layer_norm_eps": 1e-5, "logit_scale": 0.25, "tie_word_embeddings": True,
                     "num_hidden_layers": 3, "sliding_window": 4,
                     "layer_types": ["sliding_attention", "sliding_attention", "full_attention"]},
    "tiny-glm": {**_COMMON, "model_type": "glm", "architectures": ["GlmForCausalLM"],
                 "head_dim": 32, "attention_bias": True, "partial_rotary_factor": 0.5},
    "tiny-glm4": {**_COMMON, "model_type": "glm4", "architectures": ["Glm4ForCausalLM"],
                  "head_dim": 32, "attention_bias": True, "partial_rotary_factor": 0.5},
    # GLM-4.5-like MoE: layer 0 dense, layer 1 top-2 of 8 (sigmoid + correction bias, 2 of 4
    # groups kept, renormalized, scaled 2.5) + a shared expert; qk norm, q/k/v bias, RoPE on
    # half of each 32-wide head.
    "tiny-glm4_moe": {
        **_COMMON, "model_type": "glm4_moe", "architectures": ["Glm4MoeForCausalLM"],
        "head_dim": 32, "rms_norm_eps": 1e-5, "attention_bias": True, "use_qk_norm": True,
        "partial_rotary_factor": 0.5, "first_k_dense_replace": 1, "moe_intermediate_size": 20,
        "n_routed_experts": 8, "num_experts_per_tok": 2, "n_shared_experts": 1, "n_group": 4,
        "topk_group": 2, "routed_scaling_factor": 2.5, "norm_topk_prob": True,
        "num_nextn_predict_layers": 0,
    },
    "tiny-nemotron": {**_COMMON, "model_type": "nemotron", "architectures": ["NemotronForCausalLM"],
                      "hidden_act": "relu2", "norm_eps": 1e-5, "attention_bias": True,
                      "mlp_bias": True, "partial_rotary_factor": 0.5},
    # Falcon 40B/180B layout: grouped fused QKV (2 query heads per K/V head), two norms.
    "tiny-falcon": {
        "model_type": "falcon", "architectures": ["FalconForCausalLM"], "vocab_size": VOCAB_SIZE,
        "hidden_size": 64, "num_attention_heads": 4, "num_kv_heads": 2, "num_hidden_layers": 2,
        "ffn_hidden_size": 172, "max_position_embeddings": 256, "layer_norm_epsilon": 1e-5,
        "new_decoder_architecture": True, "parallel_attn": True, "bias": True, "alibi": False,
        "multi_query": True, "activation": "gelu", "rope_theta": 10000.0,
        "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "tie_word_embeddings": True,
    },
    "tiny-exaone4": {**_COMMON, "model_type": "exaone4", "architectures": ["Exaone4ForCausalLM"],
                     "num_hidden_layers": 3, "sliding_window": 4, "rms_norm_eps": 1e-5,
                     "layer_types": ["sliding_attention", "sliding_attention", "full_attention"]},
    "tiny-ernie4_5": {**_COMMON, "model_type": "ernie4_5", "architectures": ["Ernie4_5ForCausalLM"],
                      "head_dim": 16, "use_bias": True, "rms_norm_eps": 1e-5,
                      "tie_word_embeddings": True},
    # ERNIE-4.5-MoE: layer 0 dense, layer 1 routed (top-2 of 6 by p + correction bias) +
    # one shared expert; head_dim = hidden / heads (no head_dim key), biases everywhere.
    "tiny-ernie4_5_moe": {
        **_COMMON, "model_type": "ernie4_5_moe", "architectures": ["Ernie4_5_MoeForCausalLM"],
        "rms_norm_eps": 1e-5, "use_bias": True, "tie_word_embeddings": True,
        "moe_intermediate_size": 36, "moe_num_experts": 6, "moe_k": 2,
        "moe_num_shared_experts": 1, "moe_layer_start_index": 1, "moe_layer_end_index": -1,
        "moe_layer_interval": 1, "moe_norm_min": 1e-12,
    },
    "tiny-hunyuan_v1_dense": {**_COMMON, "model_type": "hunyuan_v1_dense",
                              "architectures": ["HunYuanDenseV1ForCausalLM"], "head_dim": 16,
                              "rms_norm_eps": 1e-5, "attention_bias": True},
    "tiny-smollm3": {**_COMMON, "model_type": "smollm3", "architectures": ["SmolLM3ForCausalLM"],
                     "num_hidden_layers": 4, "no_rope_layers": [1, 1, 1, 0],
                     "no_rope_layer_interval": 4},
    "tiny-phi3": {**_COMMON, "model_type": "phi3", "architectures": ["Phi3ForCausalLM"],
                  "pad_token_id": 0, "rms_norm_eps": 1e-5},
    "tiny-phi3.5": {
        **_COMMON, "model_type": "phi3", "architectures": ["Phi3ForCausalLM"],
        "max_position_embeddings": 128, "original_max_position_embeddings": 32,
        "rope_scaling": {"type": "longrope", "short_factor": [1.0 + 0.05 * i for i in range(8)],
                         "long_factor": [1.5 + 0.25 * i for i in range(8)]},
        "partial_rotary_factor": 1.0,
    },
    "tiny-phi": {
        **_COMMON, "model_type": "phi", "architectures": ["PhiForCausalLM"],
        "num_key_value_heads": 4, "hidden_act": "gelu_new", "layer_norm_eps": 1e-5,
        "partial_rotary_factor": 0.5,
    },
    "tiny-gpt2": {
        "model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": VOCAB_SIZE,
        "n_embd": 64, "n_head": 4, "n_layer": 2, "n_positions": 256, "n_inner": 172,
        "activation_function": "gelu_new", "layer_norm_epsilon": 1e-5,
        "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "tie_word_embeddings": True,
    },
    # Vision-language: tiny CLIP tower (32 px images, 8 px patches: 16 image tokens per
    # image; hidden 48, 4 heads of 12, MLP 100) + projector + tiny Llama text model.
    # The image token is a real vocabulary entry (transformers embeds it before
    # overwriting), the last one so random prompts rarely hit it.
    "tiny-llava": {
        "model_type": "llava", "architectures": ["LlavaForConditionalGeneration"],
        "image_token_index": VOCAB_SIZE - 1, "image_seq_length": 16,
        "projector_hidden_act": "gelu", "vision_feature_layer": -2,
        "vision_feature_select_strategy": "default", "multimodal_projector_bias": True,
        "tie_word_embeddings": False,
        "text_config": {**_COMMON, "model_type": "llama", "architectures": ["LlamaForCausalLM"]},
        "vision_config": {
            "model_type": "clip_vision_model", "hidden_size": 48, "intermediate_size": 100,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_channels": 3,
            "image_size": 32, "patch_size": 8, "hidden_act": "quick_gelu",
            "layer_norm_eps": 1e-5, "projection_dim": 40,
        },
    },
    # Gemma 3 vision-language: tiny SigLIP tower (64 px images, 4 px patches: a 16 x 16 grid;
    # hidden 48, 4 heads of 12, MLP 100) + projector (256 tokens per image, as
    # onnxruntime-genai's gemma3 processor expands each image; the parity test pools to
    # fewer) + the tiny-gemma3 text model. boi / eoi / image tokens: the last three ids.
    "tiny-gemma3-vl": {
        "model_type": "gemma3", "architectures": ["Gemma3ForConditionalGeneration"],
        "mm_tokens_per_image": 256, "boi_token_index": VOCAB_SIZE - 3,
        "eoi_token_index": VOCAB_SIZE - 2, "image_token_index": VOCAB_SIZE - 1,
        "tie_word_embeddings": True,
        "text_config": {**{k: v for k, v in TINY_PRESETS_GEMMA3.items() if k != "architectures"},
                        "max_position_embeddings": 512},  # 256 image tokens + text
        "vision_config": {
            "model_type": "siglip_vision_model", "hidden_size": 48, "intermediate_size": 100,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_channels": 3,
            "image_size": 64, "patch_size": 4, "hidden_act": "gelu_pytorch_tanh",
            "layer_norm_eps": 1e-6, "vision_use_head": False,
        },
    },
    # Speech seq2seq: 20 mel bins x 60 frames -> 30 encoder positions (conv2 stride 2);
    # d_model 48, 4 heads of 12, encoder MLP 100, decoder MLP 88, 40 decoder positions.
    "tiny-whisper": {
        "model_type": "whisper", "architectures": ["WhisperForConditionalGeneration"],
        "vocab_size": VOCAB_SIZE, "num_mel_bins": 20, "d_model": 48,
        "encoder_layers": 2, "decoder_layers": 2, "encoder_attention_heads": 4,
        "decoder_attention_heads": 4, "encoder_ffn_dim": 100, "decoder_ffn_dim": 88,
        "max_source_positions": 30, "max_target_positions": 40, "activation_function": "gelu",
        "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0, "decoder_start_token_id": 3,
        "begin_suppress_tokens": None, "suppress_tokens": None, "tie_word_embeddings": True,
    },
    # Text2text: d_model 48 but 4 heads of d_kv 16 (inner 64); 8 buckets over distance 6, so
    # the exact, logarithmic and saturated buckets all occur at tiny lengths. tiny-t5: ReLU
    # feed-forward, head tied to `shared` (scaled); tiny-mt5: gated-gelu, 3 + 1 layers.
    "tiny-t5": {
        "model_type": "t5", "architectures": ["T5ForConditionalGeneration"],
        "vocab_size": VOCAB_SIZE, "d_model": 48, "d_kv": 16, "d_ff": 88, "num_layers": 2,
        "num_decoder_layers": 2, "num_heads": 4, "relative_attention_num_buckets": 8,
        "relative_attention_max_distance": 6, "feed_forward_proj": "relu",
        "layer_norm_epsilon": 1e-6, "pad_token_id": 0, "eos_token_id": 2,
        "decoder_start_token_id": 0, "tie_word_embeddings": True,
    },
    "tiny-mt5": {
        "model_type": "mt5", "architectures": ["MT5ForConditionalGeneration"],
        "vocab_size": VOCAB_SIZE, "d_model": 48, "d_kv": 16, "d_ff": 88, "num_layers": 3,
        "num_decoder_layers": 1, "num_heads": 4, "relative_attention_num_buckets": 8,
        "relative_attention_max_distance": 6, "feed_forward_proj": "gated-gelu",
        "layer_norm_epsilon": 1e-6, "pad_token_id": 0, "eos_token_id": 2,
        "decoder_start_token_id": 0,
    },
    # BART: encoder 3 layers x 6 heads, decoder 2 x 4 heads (the cross K/V are the
    # decoder's), scaled embeddings, 40 positions (+2 offset rows).
    "tiny-bart": {
        "model_type": "bart", "architectures": ["BartForConditionalGeneration"],
        "vocab_size": VOCAB_SIZE, "d_model": 48, "encoder_layers": 3, "decoder_layers": 2,
        "encoder_attention_heads": 6, "decoder_attention_heads": 4, "encoder_ffn_dim": 100,
        "decoder_ffn_dim": 88, "max_position_embeddings": 40, "activation_function": "gelu",
        "scale_embedding": True, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
        "decoder_start_token_id": 2, "forced_eos_token_id": None, "tie_word_embeddings": True,
    },
    # Marian (opus-mt): BART's shape with sinusoidal positions, swish, no embedding norm.
    "tiny-marian": {
        "model_type": "marian", "architectures": ["MarianMTModel"],
        "vocab_size": VOCAB_SIZE, "d_model": 48, "encoder_layers": 2, "decoder_layers": 2,
        "encoder_attention_heads": 4, "decoder_attention_heads": 6, "encoder_ffn_dim": 100,
        "decoder_ffn_dim": 88, "max_position_embeddings": 40, "activation_function": "swish",
        "scale_embedding": True, "pad_token_id": 0, "eos_token_id": 2,
        "decoder_start_token_id": 0, "forced_eos_token_id": None, "tie_word_embeddings": True,
    },
    "tiny-bert": {
        "model_type": "bert", "architectures": ["BertModel"], "vocab_size": VOCAB_SIZE,
        "hidden_size": 64, "intermediate_size": 172, "num_hidden_layers": 2,
        "num_attention_heads": 4, "max_position_embeddings": 256, "type_vocab_size": 2,
        "hidden_act": "gelu", "layer_norm_eps": 1e-12, "pad_token_id": 0,
    },
    # RoBERTa numbers positions from pad_token_id + 1: pad 1 (its real value) makes
    # the offset matter; max_position_embeddings leaves room for the offset.
    "tiny-roberta": {
        "model_type": "roberta", "architectures": ["RobertaModel"], "vocab_size": VOCAB_SIZE,
        "hidden_size": 64, "intermediate_size": 172, "num_hidden_layers": 2,
        "num_attention_heads": 4, "max_position_embeddings": 258, "type_vocab_size": 1,
        "hidden_act": "gelu", "layer_norm_eps": 1e-5, "pad_token_id": 1,
    },
    "tiny-xlm-roberta": {
        "model_type": "xlm-roberta", "architectures": ["XLMRobertaModel"],
        "vocab_size": VOCAB_SIZE, "hidden_size": 64, "intermediate_size": 172,
        "num_hidden_layers": 2, "num_attention_heads": 4, "max_position_embeddings": 258,
        "type_vocab_size": 1, "hidden_act": "gelu", "layer_norm_eps": 1e-5, "pad_token_id": 1,
    },
    "tiny-distilbert": {
        "model_type": "distilbert", "architectures": ["DistilBertModel"], "vocab_size": VOCAB_SIZE,
        "dim": 64, "hidden_dim": 172, "n_layers": 2, "n_heads": 4,
        "max_position_embeddings": 256, "activation": "gelu", "pad_token_id": 0,
    },
    # CTC speech recognition on raw waveforms: 3 convs (strides 5, 2, 2: 20 samples a frame),
    # a 37-token character vocabulary, an even positional-conv kernel (6, groups 4).
    # wav2vec2: group-norm feature encoder, post-norm layers, bias-less convs (wav2vec2-base);
    # hubert: layer-norm feature encoder (takes attention_mask), pre-norm layers, conv biases.
    "tiny-wav2vec2": {
        "model_type": "wav2vec2", "architectures": ["Wav2Vec2ForCTC"], "vocab_size": 37,
        "hidden_size": 64, "intermediate_size": 88, "num_hidden_layers": 2,
        "num_attention_heads": 4, "hidden_act": "gelu", "layer_norm_eps": 1e-5,
        "conv_dim": [24, 24, 40], "conv_stride": [5, 2, 2], "conv_kernel": [10, 3, 3],
        "conv_bias": False, "feat_extract_norm": "group", "feat_extract_activation": "gelu",
        "num_conv_pos_embeddings": 6, "num_conv_pos_embedding_groups": 4,
        "do_stable_layer_norm": False, "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2,
    },
    "tiny-hubert": {
        "model_type": "hubert", "architectures": ["HubertForCTC"], "vocab_size": 37,
        "hidden_size": 64, "intermediate_size": 88, "num_hidden_layers": 2,
        "num_attention_heads": 4, "hidden_act": "gelu", "layer_norm_eps": 1e-5,
        "conv_dim": [24, 24, 40], "conv_stride": [5, 2, 2], "conv_kernel": [10, 3, 3],
        "conv_bias": True, "feat_extract_norm": "layer", "feat_extract_activation": "gelu",
        "num_conv_pos_embeddings": 6, "num_conv_pos_embedding_groups": 4,
        "do_stable_layer_norm": True, "feat_proj_layer_norm": True, "pad_token_id": 0,
        "bos_token_id": 1, "eos_token_id": 2,
    },
    # MPNet: positions count from padding_idx 1 + 1 (hence 258); 40 bias-table rows where
    # transformers indexes 32 buckets: reading the table size as the bucket count fails.
    "tiny-mpnet": {
        "model_type": "mpnet", "architectures": ["MPNetModel"], "vocab_size": VOCAB_SIZE,
        "hidden_size": 64, "intermediate_size": 172, "num_hidden_layers": 2,
        "num_attention_heads": 4, "max_position_embeddings": 258,
        "relative_attention_num_buckets": 40, "hidden_act": "gelu", "layer_norm_eps": 1e-5,
        "pad_token_id": 1,
    },
    # ModernBERT: 3 layers, global every 2nd (full, sliding, full; the default 3 would make
    # layer 2 local), local window 4 (2 either side) well inside the test sequence, distinct
    # global/local RoPE bases; GeGLU intermediate 88 (Wi: 176). Biases off, as released.
    "tiny-modernbert": {
        "model_type": "modernbert", "architectures": ["ModernBertModel"],
        "vocab_size": VOCAB_SIZE, "hidden_size": 64, "intermediate_size": 88,
        "num_hidden_layers": 3, "num_attention_heads": 4, "max_position_embeddings": 256,
        "global_attn_every_n_layers": 2, "local_attention": 4, "global_rope_theta": 160000.0,
        "local_rope_theta": 10000.0, "hidden_activation": "gelu", "norm_eps": 1e-5,
        "pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2, "cls_token_id": 1,
        "sep_token_id": 2,
    },
}

#: classifier heads on the tiny encoders (mobius/models/classifiers.py): label counts
#: distinct from every other dim, named labels so id2label is visible in the package
_HEADS = {"seq-cls": ("ForSequenceClassification", ["NEGATIVE", "NEUTRAL", "POSITIVE"]),
          "tok-cls": ("ForTokenClassification", ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"])}
_ARCH_PREFIX = {"bert": "Bert", "roberta": "Roberta", "xlm-roberta": "XLMRoberta",
                "distilbert": "DistilBert", "mpnet": "MPNet", "modernbert": "ModernBert"}
for _base, _prefix in _ARCH_PREFIX.items():
    for _kind, (_suffix, _labels) in _HEADS.items():
        TINY_PRESETS[f"tiny-{_base}-{_kind}"] = {
            **TINY_PRESETS[f"tiny-{_base}"], "architectures": [_prefix + _suffix],
            "id2label": {str(i): name for i, name in enumerate(_labels)},
            "label2id": {name: i for i, name in enumerate(_labels)}}
    TINY_PRESETS[f"tiny-{_base}-mlm"] = {**TINY_PRESETS[f"tiny-{_base}"],
                                         "architectures": [_prefix + "ForMaskedLM"]}

# Image families (mobius/models/vit.py, dinov2.py, siglip.py, clip_models.py): 32 px
# images, 8 px patches (16 patches), vision hidden 48 (4 heads of 12), MLP 100 (DINOv2:
# mlp_ratio 2 -> 96), 7 labels; the zero-shot text towers: hidden 32 (2 heads of 16),
# MLP 88, 24 positions, projection 40 (CLIP; SigLIP's text head maps to the vision width).
_VISION = {"hidden_size": 48, "intermediate_size": 100, "num_hidden_layers": 2,
           "num_attention_heads": 4, "num_channels": 3, "image_size": 32, "patch_size": 8}
_IMAGE_LABELS = ["tabby", "tiger", "lion", "lynx", "puma", "ocelot", "serval"]
_LABELS = {"id2label": {str(i): name for i, name in enumerate(_IMAGE_LABELS)},
           "label2id": {name: i for i, name in enumerate(_IMAGE_LABELS)}}
_TEXT = {"vocab_size": VOCAB_SIZE, "hidden_size": 32, "intermediate_size": 88,
         "num_hidden_layers": 2, "num_attention_heads": 2, "max_position_embeddings": 24}
_CLIP_TEXT = {**_TEXT, "model_type": "clip_text_model", "hidden_act": "quick_gelu",
              "layer_norm_eps": 1e-5, "bos_token_id": 1, "eos_token_id": 3, "pad_token_id": 0}
_SIGLIP_TEXT = {**_TEXT, "model_type": "siglip_text_model", "hidden_act": "gelu_pytorch_tanh",
                "layer_norm_eps": 1e-6, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 0,
                "projection_size": 48}  # = vision hidden (SigLIP)
_CLIP_VISION = {**_VISION, "model_type": "clip_vision_model", "hidden_act": "quick_gelu",
                "layer_norm_eps": 1e-5}
_SIGLIP_VISION = {**_VISION, "model_type": "siglip_vision_model",
                  "hidden_act": "gelu_pytorch_tanh", "layer_norm_eps": 1e-6}
_VIT = {**_VISION, "model_type": "vit", "hidden_act": "gelu", "layer_norm_eps": 1e-12,
        "qkv_bias": True}
_DINOV2 = {**{k: v for k, v in _VISION.items() if k != "intermediate_size"},
           "model_type": "dinov2", "mlp_ratio": 2, "hidden_act": "gelu", "layer_norm_eps": 1e-6}
TINY_PRESETS.update({
    "tiny-vit": {**_VIT, "architectures": ["ViTModel"]},
    "tiny-vit-img-cls": {**_VIT, "architectures": ["ViTForImageClassification"], **_LABELS},
    "tiny-dinov2": {**_DINOV2, "architectures": ["Dinov2Model"]},
    "tiny-dinov2-img-cls": {**_DINOV2, "architectures": ["Dinov2ForImageClassification"],
                            **_LABELS},
    "tiny-siglip-vision": {**_SIGLIP_VISION, "architectures": ["SiglipVisionModel"]},
    "tiny-siglip-img-cls": {"model_type": "siglip",
                            "architectures": ["SiglipForImageClassification"],
                            "text_config": _SIGLIP_TEXT, "vision_config": _SIGLIP_VISION,
                            **_LABELS},
    "tiny-siglip": {"model_type": "siglip", "architectures": ["SiglipModel"],
                    "text_config": _SIGLIP_TEXT, "vision_config": _SIGLIP_VISION},
    "tiny-clip-vision": {**_CLIP_VISION, "architectures": ["CLIPVisionModel"]},
    "tiny-clip-img-cls": {"model_type": "clip", "architectures": ["CLIPForImageClassification"],
                          "text_config": _CLIP_TEXT, "vision_config": _CLIP_VISION,
                          "projection_dim": 40, **_LABELS},
    "tiny-clip": {"model_type": "clip", "architectures": ["CLIPModel"], "text_config": _CLIP_TEXT,
                  "vision_config": _CLIP_VISION, "projection_dim": 40},
})
# DeBERTa-v3 style: relative attention only (no absolute positions, no token types),
# shared attention keys, both c2p and p2c, LayerNorm'ed relative embeddings; 6 buckets
# (exact to 3, log-spaced to max distance 16): the test sequence reaches the log range.
_DEBERTA = {
    "model_type": "deberta-v2", "vocab_size": VOCAB_SIZE, "hidden_size": 64,
    "intermediate_size": 172, "num_hidden_layers": 2, "num_attention_heads": 4,
    "max_position_embeddings": 128, "type_vocab_size": 0, "hidden_act": "gelu",
    "layer_norm_eps": 1e-7, "pad_token_id": 0, "relative_attention": True,
    "position_buckets": 6, "max_relative_positions": 16, "pos_att_type": ["p2c", "c2p"],
    "share_att_key": True, "norm_rel_ebd": "layer_norm", "position_biased_input": False,
    "pooler_hidden_act": "gelu",
}
TINY_PRESETS["tiny-deberta-v2"] = {**_DEBERTA, "architectures": ["DebertaV2Model"]}
for _kind, (_suffix, _labels) in _HEADS.items():
    TINY_PRESETS[f"tiny-deberta-v2-{_kind}"] = {
        **_DEBERTA, "architectures": ["DebertaV2" + _suffix],
        "id2label": {str(i): name for i, name in enumerate(_labels)},
        "label2id": {name: i for i, name in enumerate(_labels)}}

# Qwen2.5-VL (mobius/models/qwen2_5_vl.py): the common decoder with M-RoPE sections 2/3/3
# of its 8 frequencies; a 2-layer vision tower (hidden 32, 2 heads of 16, MLP 40) on 4 px
# patches, 2x2 merge, 16 px windows (2x2 merged tokens), layer 1 full attention. The
# image/video/vision-start tokens are the vocabulary's last entries.
_QWEN_VL_TEXT = {k: v for k, v in _COMMON.items() if k != "rope_theta"}
TINY_PRESETS["tiny-qwen2_5_vl"] = {
    "model_type": "qwen2_5_vl", "architectures": ["Qwen2_5_VLForConditionalGeneration"],
    "image_token_id": VOCAB_SIZE - 1, "video_token_id": VOCAB_SIZE - 2,
    "vision_start_token_id": VOCAB_SIZE - 3, "vision_end_token_id": VOCAB_SIZE - 4,
    "tie_word_embeddings": False,
    "text_config": {**_QWEN_VL_TEXT, "model_type": "qwen2_5_vl_text",
                    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0,
                                        "mrope_section": [2, 3, 3]}},
    "vision_config": {
        "model_type": "qwen2_5_vl_vision", "depth": 2, "hidden_size": 32,
        "intermediate_size": 40, "num_heads": 2, "in_channels": 3, "patch_size": 4,
        "spatial_merge_size": 2, "temporal_patch_size": 2, "window_size": 16,
        "fullatt_block_indexes": [1], "out_hidden_size": 64, "tokens_per_second": 4,
        "hidden_act": "silu",
    },
}

# Qwen3-VL (mobius/models/qwen3_vl.py): the common decoder with QK norm and interleaved
# M-RoPE sections 2/3/3; a 3-layer vision tower (LayerNorm, GELU MLP 40) on 4 px patches,
# 2x2 merge, a learned 4x4 position grid, deepstack features of vision layers 0 and 2
# added after decoder layers 0 and 1.
TINY_PRESETS["tiny-qwen3_vl"] = {
    "model_type": "qwen3_vl", "architectures": ["Qwen3VLForConditionalGeneration"],
    "image_token_id": VOCAB_SIZE - 1, "video_token_id": VOCAB_SIZE - 2,
    "vision_start_token_id": VOCAB_SIZE - 3, "vision_end_token_id": VOCAB_SIZE - 4,
    "tie_word_embeddings": False,
    "text_config": {**_QWEN_VL_TEXT, "model_type": "qwen3_vl_text", "head_dim": 16,
                    "attention_bias": False,
                    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0,
                                        "mrope_section": [2, 3, 3], "mrope_interleaved": True}},
    "vision_config": {
        "model_type": "qwen3_vl_vision", "depth": 3, "hidden_size": 32,
        "intermediate_size": 40, "num_heads": 2, "in_channels": 3, "patch_size": 4,
        "spatial_merge_size": 2, "temporal_patch_size": 2, "out_hidden_size": 64,
        "num_position_embeddings": 16, "deepstack_visual_indexes": [0, 2],
        "hidden_act": "gelu_pytorch_tanh",
    },
}

# Mistral 3 (mobius/models/mistral3.py): the common decoder as Mistral (head_dim 16, no
# sliding window) + a 2-layer Pixtral tower (hidden 48, 4 heads of 12, MLP 100, 4 px
# patches, images up to 64 px) and a 2 x 2 patch merger. [IMG] / [IMG_BREAK] /
# [IMG_END] / [INST] are the vocabulary's last four ids.
TINY_PRESETS["tiny-mistral3"] = {
    "model_type": "mistral3", "architectures": ["Mistral3ForConditionalGeneration"],
    "image_token_index": VOCAB_SIZE - 1, "spatial_merge_size": 2,
    "projector_hidden_act": "gelu", "vision_feature_layer": -1,
    "multimodal_projector_bias": False, "tie_word_embeddings": False,
    "text_config": {**_COMMON, "model_type": "mistral", "head_dim": 16, "sliding_window": None},
    "vision_config": {
        "model_type": "pixtral", "hidden_size": 48, "intermediate_size": 100,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_channels": 3,
        "image_size": 64, "patch_size": 4, "hidden_act": "gelu",
        "rope_parameters": {"rope_type": "axial", "rope_theta": 10000.0},
    },
}

# LFM2-VL: the tiny-lfm2 hybrid decoder (conv, attention, conv), a 2-layer SigLIP2 NaFlex
# tower (hidden 32, 2 heads, MLP 40) on 4 px patches with a 4 x 4 position grid, 2 x 2
# pixel unshuffle, layer-normed projector (hidden 48, gelu, biased). The image token is
# the vocabulary's last entry, the image start / end tokens the two before it.
TINY_PRESETS["tiny-lfm2-vl"] = {
    "model_type": "lfm2_vl", "architectures": ["Lfm2VlForConditionalGeneration"],
    "image_token_id": VOCAB_SIZE - 1, "tie_word_embeddings": True,
    "projector_hidden_size": 48, "projector_hidden_act": "gelu", "projector_bias": True,
    "projector_use_layernorm": True, "downsample_factor": 2,
    "text_config": {k: v for k, v in TINY_PRESETS["tiny-lfm2"].items() if k != "architectures"},
    "vision_config": {
        "model_type": "siglip2_vision_model", "hidden_size": 32, "intermediate_size": 40,
        "num_hidden_layers": 2, "num_attention_heads": 2, "num_channels": 3, "patch_size": 4,
        "num_patches": 16, "hidden_act": "gelu_pytorch_tanh", "layer_norm_eps": 1e-6,
        "vision_use_head": False,
    },
}

# Phi-4-multimodal (mobius/models/phi4_multimodal.py): the common decoder as Phi-3 with
# partial rotary 0.75 (12 of 16 dims); a 2-layer SigLIP tower (hidden 32, 2 heads, MLP
# 48) on genai's fixed 448 px crops of 14 px patches (32 x 32 -> 16 x 16 pooled tokens),
# read at hidden state -2; a 1-block conformer audio tower the package does not build.
# The image/audio tokens are the vocabulary's last entries.
TINY_PRESETS["tiny-phi4mm"] = {
    **_COMMON, "model_type": "phi4_multimodal", "architectures": ["Phi4MultimodalForCausalLM"],
    "pad_token_id": 0, "rms_norm_eps": 1e-5, "max_position_embeddings": 4096,
    "original_max_position_embeddings": 4096, "tie_word_embeddings": False,
    "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0,
                        "partial_rotary_factor": 0.75},
    "vision_config": {
        "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
        "num_attention_heads": 2, "image_size": 448, "patch_size": 14, "crop_size": 448,
        "image_token_id": VOCAB_SIZE - 1, "feature_layer": -2,
    },
    "audio_config": {
        "hidden_size": 32, "intermediate_size": 48, "num_blocks": 1, "num_attention_heads": 2,
        "ext_pw_out_channel": 32, "depthwise_separable_out_channel": 32,
        "nemo_conv_channels": 32, "audio_token_id": VOCAB_SIZE - 2,
    },
}
