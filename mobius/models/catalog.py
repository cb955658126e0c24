"""The family x EP support table, derived from the two registries.

``mobius list models`` prints it and docs/models.md is generated from it
(a test fails when the committed file is stale).
"""

from __future__ import annotations

from mobius.ep.capabilities import EpCapabilities
from mobius.ep.registry import ep_registry
from mobius.models.family import ModelFamily
from mobius.errors import UnsupportedModelError
from mobius.models.registry import FAMILIES, family_for
from mobius.tasks.registry import TASKS
from mobius.weights.dtypes import SHORT_NAMES

_DTYPE_ORDER = ("f32", "f16", "bf16")


def support(family: ModelFamily, caps: EpCapabilities) -> str:
    """A cell: the dtypes this (family, EP) builds, or why it cannot."""
    if caps.tasks is not None and family.task.name not in caps.tasks:
        return f"no ({caps.name} runs {', '.join(sorted(caps.tasks))} only)"
    names = {SHORT_NAMES[d] for d in caps.dtypes}
    return " ".join(d for d in _DTYPE_ORDER if d in names)


def models_table() -> list[list[str]]:
    eps = list(ep_registry)
    rows = [["family", "model_type", "task", *(caps.name for caps in eps)]]
    for family in FAMILIES:
        keys = family.model_types or family.architectures  # heads: matched by architecture
        rows.append([family.name, ", ".join(keys), family.task.name,
                     *(support(family, caps) for caps in eps)])
    return rows


def tasks_table() -> list[list[str]]:
    """One row per registered task: its package's models and what runs it."""
    rows = [["task", "models (role)", "runtime", "outputs", "families"]]
    for task in TASKS.values():
        families = [f.name for f in FAMILIES if f.task is task]
        models = ", ".join(f"{key} ({role})" for key, role in task.roles.items())
        runtime = "onnxruntime-genai" if task.package_configs else "onnxruntime"
        rows.append([task.name, models, runtime, ", ".join(task.reference.outputs),
                     ", ".join(families)])
    return rows


def _markdown_table(rows: list[list[str]]) -> list[str]:
    return (["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
            + ["| " + " | ".join(row) + " |" for row in rows[1:]])


#: The architectures ORT GenAI's model builder 0.18 builds (its builder.py dispatch), with
#: the model_type their hub checkpoints state: mobius looks a checkpoint up by both.
PEER_ARCHITECTURES: tuple[tuple[str, str], ...] = (
    ("ChatGLMForConditionalGeneration", "chatglm"), ("ChatGLMModel", "chatglm"),
    ("Ernie4_5ForCausalLM", "ernie4_5"), ("GemmaForCausalLM", "gemma"),
    ("Gemma2ForCausalLM", "gemma2"), ("Gemma3ForCausalLM", "gemma3_text"),
    ("Gemma3ForConditionalGeneration", "gemma3"), ("Gemma4ForConditionalGeneration", "gemma4"),
    ("Gemma4UnifiedForConditionalGeneration", "gemma4_unified"),
    ("GptOssForCausalLM", "gpt_oss"), ("GraniteForCausalLM", "granite"),
    ("GraniteMoeHybridForCausalLM", "granitemoehybrid"),
    ("HunYuanDenseV1ForCausalLM", "hunyuan_v1_dense"), ("InternLM2ForCausalLM", "internlm2"),
    ("Lfm2ForCausalLM", "lfm2"), ("Lfm2MoeForCausalLM", "lfm2_moe"),
    ("Lfm2VlForConditionalGeneration", "lfm2_vl"),
    ("Lfm2AudioForConditionalGeneration", "lfm2_audio"), ("LlamaForCausalLM", "llama"),
    ("MistralForCausalLM", "mistral"), ("Mistral3ForConditionalGeneration", "mistral3"),
    ("NemotronForCausalLM", "nemotron"), ("OlmoForCausalLM", "olmo"),
    ("PhiForCausalLM", "phi"), ("Phi3ForCausalLM", "phi3"), ("PhiMoEForCausalLM", "phimoe"),
    ("Phi3SmallForCausalLM", "phi3small"), ("Phi3VForCausalLM", "phi3_v"),
    ("Phi4MMForCausalLM", "phi4mm"), ("Qwen2ForCausalLM", "qwen2"),
    ("Qwen2_5_VLForConditionalGeneration", "qwen2_5_vl"), ("Qwen3ForCausalLM", "qwen3"),
    ("Qwen3VLForConditionalGeneration", "qwen3_vl"),
    ("Qwen3_5ForConditionalGeneration", "qwen3_5"),
    ("Qwen3_5MoeForConditionalGeneration", "qwen3_5_moe"), ("SmolLM3ForCausalLM", "smollm3"),
    ("VideoChatFlashQwenForCausalLM", "videochat_flash_qwen"),
    ("WhisperForConditionalGeneration", "whisper"),
)


def peer_table() -> list[list[str]]:
    """Each architecture of the peer's builder and the mobius family that builds it."""
    rows = [["architecture (ORT GenAI builder 0.18)", "model_type", "mobius family"]]
    for architecture, model_type in PEER_ARCHITECTURES:
        try:
            name = family_for({"architectures": [architecture], "model_type": model_type}).name
        except UnsupportedModelError:
            name = "not yet"
        rows.append([architecture, model_type, name])
    return rows


def models_markdown() -> str:
    lines = [
        "# Supported models",
        "",
        "Generated from the model and EP registries by `./bazelw run //tools:models_doc`;",
        "a test fails when this file is stale. Each cell lists the dtypes the EP builds",
        "for the family (bf16 on EPs without bf16 kernels is stored in bf16 and computed",
        "in f32), or why the pair is rejected before building.",
        "",
        *_markdown_table(models_table()),
        "",
        "## Tasks",
        "",
        "Generated from the task registry (mobius/tasks). Packages of onnxruntime-genai",
        "tasks carry a genai_config.json; the others are for plain onnxruntime: see",
        "docs/examples/ (sentence_embeddings.py, text_classification.py, fill_mask.py,",
        "image_classification.py, zero_shot_image_classification.py, speech_recognition.py,",
        "text2text.py).",
        "",
        *_markdown_table(tasks_table()),
        "",
        "LLaVA packages carry a genai_config.json (vision, embedding and decoder sections),",
        "but onnxruntime-genai 0.18 has no \"llava\" model type and refuses them: run them",
        "with plain onnxruntime, as docs/examples/llava_generate.py does.",
        "EXAONE 4.5 packages are laid out as Qwen2.5-VL's (same vision inputs and image",
        "processor) but their decoder takes plain [batch, seq] position_ids; genai 0.18 has",
        "no exaone4_5 type (its qwen2_5_vl type would feed 3-D M-RoPE positions), so they",
        "too run with plain onnxruntime.",
        "Qwen2.5-VL packages are onnxruntime-genai's own qwen2_5_vl type: genai's",
        "MultiModalProcessor reads their processor_config.json, and genai computes the",
        "decoder's 3-D (M-RoPE) position_ids [3, batch, seq] from the prompt and image_grid_thw.",
        "Qwen3-VL packages are genai's qwen3_vl type, laid out the same way; the vision",
        "tower's deepstack features (added to the first decoder layers' hidden states at",
        "image tokens) travel beside the embeddings: image_features and inputs_embeds are",
        "hidden * (1 + deepstack layers) wide, genai_config's decoder hidden_size says so,",
        "and the decoder splits them.",
        "Mistral 3 packages are onnxruntime-genai's own mistral3 type: the vision model takes",
        "images of any size (multiples of patch_size * spatial_merge_size), and genai crops each",
        "image of a batch out of the padded pixel_values by image_sizes and runs it alone.",
        "Phi-3-vision packages are genai's own phi3v type: its processor (16 HD crops of 336",
        "px) marks image i's tokens -i, which the embedding model replaces by the features;",
        "a checkpoint whose preprocessor_config.json asks another num_crops (Phi-3.5-vision's",
        "4) is refused, since genai's processor would crop differently.",
        "Gemma 4 Unified packages are genai's gemma4_unified type: their processor_config.json",
        "runs genai's Gemma4ImageTransform at the merged tile (patch_size x pooling_kernel_size,",
        "a kernel of 1), transformers' tiles within about one 8-bit level, so genai's",
        "MultiModalProcessor takes images (and audio clips) itself; preprocessor settings",
        "it cannot follow (no resize, other resampling, rescale or normalization) are refused.",
        "",
        "## Against ORT GenAI's model builder",
        "",
        f"The {len(PEER_ARCHITECTURES)} architectures onnxruntime-genai 0.18's model builder",
        "builds, looked up in mobius' registry by architecture and model_type as a",
        "checkpoint's config.json states them (\"not yet\": no family builds it today).",
        "",
        *_markdown_table(peer_table()),
    ]
    return "\n".join(lines) + "\n"
