"""The model registry: HF model_type (or architecture name) -> ModelFamily.

Adding a family is one file under mobius/models and one line here.
"""

from __future__ import annotations

from mobius.errors import UnsupportedModelError
from mobius.models import bert, gemma, gpt2, granite, llama, mistral, olmo2, phi, phi3, qwen, smollm3
from mobius.models import llava, mixtral, qwen_moe
from mobius.models import classifiers, distilbert, masked_lm, whisper
from mobius.models import cohere, ernie4_5, exaone4, falcon, glm, hunyuan_v1_dense, nemotron
from mobius.models import olmo, stablelm, starcoder2
from mobius.models import granitemoe, olmoe, phimoe
from mobius.models import granitemoehybrid
from mobius.models import deepseek
from mobius.models import lfm2, lfm2_moe
from mobius.models import clip_models, dinov2, siglip, vit
from mobius.models import wav2vec2
from mobius.models import gpt_oss
from mobius.models import deberta_v2, modernbert, modernbert_heads, mpnet
from mobius.models import bart, marian, t5
from mobius.models import ernie4_5_moe
from mobius.models import glm4_moe
from mobius.models import gemma3
from mobius.models import qwen2_5_vl
from mobius.models import qwen3_vl
from mobius.models import mistral3
from mobius.models import lfm2_vl
from mobius.models import phi4_multimodal
from mobius.models.family import ModelFamily

FAMILIES: tuple[ModelFamily, ...] = (
    llama.FAMILY,
    mistral.FAMILY,
    qwen.QWEN2,
    qwen.QWEN3,
    mixtral.FAMILY,
    qwen_moe.QWEN3_MOE,
    qwen_moe.QWEN2_MOE,
    olmoe.FAMILY,
    granitemoe.FAMILY,
    granitemoehybrid.FAMILY,
    phimoe.FAMILY,
    *deepseek.FAMILIES,
    gpt_oss.FAMILY,
    lfm2.FAMILY,
    lfm2_moe.FAMILY,
    gemma.GEMMA,
    gemma.GEMMA2,
    gemma.GEMMA3,
    granite.FAMILY,
    olmo2.FAMILY,
    olmo.FAMILY,
    starcoder2.FAMILY,
    stablelm.FAMILY,
    cohere.COHERE,
    cohere.COHERE2,
    glm.GLM,
    glm.GLM4,
    nemotron.FAMILY,
    falcon.FAMILY,
    exaone4.FAMILY,
    ernie4_5.FAMILY,
    hunyuan_v1_dense.FAMILY,
    smollm3.FAMILY,
    phi3.FAMILY,
    phi.FAMILY,
    gpt2.FAMILY,
    bert.FAMILY,
    bert.ROBERTA,
    bert.XLM_ROBERTA,
    distilbert.FAMILY,
    mpnet.FAMILY,
    modernbert.FAMILY,
    *classifiers.FAMILIES,
    *masked_lm.FAMILIES,
    *modernbert_heads.FAMILIES,
    *deberta_v2.FAMILIES,
    llava.FAMILY,
    gemma3.FAMILY,
    whisper.FAMILY,
    vit.FAMILY,
    vit.CLASSIFIER,
    dinov2.FAMILY,
    dinov2.CLASSIFIER,
    siglip.VISION_FAMILY,
    siglip.CLASSIFIER,
    siglip.ZERO_SHOT,
    clip_models.VISION_FAMILY,
    clip_models.CLASSIFIER,
    clip_models.ZERO_SHOT,
    wav2vec2.FAMILY,
    wav2vec2.HUBERT,
    *t5.FAMILIES,
    bart.FAMILY,
    marian.FAMILY,
    ernie4_5_moe.FAMILY,
    glm4_moe.FAMILY,
    qwen2_5_vl.FAMILY,
    qwen3_vl.FAMILY,
    mistral3.FAMILY,
    lfm2_vl.FAMILY,
    phi4_multimodal.FAMILY,
)

_BY_KEY = {key: family for family in FAMILIES for key in (*family.model_types, *family.architectures)}


def supported_model_types() -> list[str]:
    return sorted(t for family in FAMILIES for t in family.model_types)


def family_for(raw_config: dict) -> ModelFamily:
    """Finds the family of a config.json dict: by architecture name first (a head such
    as BertForSequenceClassification is its own family), then by model_type."""
    keys = [*(raw_config.get("architectures") or []), raw_config.get("model_type")]
    for key in keys:
        if key in _BY_KEY:
            return _BY_KEY[key]
    raise UnsupportedModelError(
        f"model_type {raw_config.get('model_type')!r} is not supported; "
        f"supported: {', '.join(supported_model_types())}"
    )
