"""What the tiny presets of several families share: each family file declares its own
presets (a TINY_PRESETS dict) from these bases.

Dimensions are tiny but distinct from each other (and the vocabulary size
from everything else) so that a transposed or swapped weight cannot pass a
test by accident. head_dim is 16 so fused attention kernels with rotary
(which need head_size % 16 == 0 on CPU) apply. A checkpoint's random values follow
from its config (seed 0): changing a value changes every golden built from it.
"""

VOCAB_SIZE = 1031

#: the decoder every causal-LM preset starts from
COMMON = {
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

#: classifier heads on the tiny encoders (mobius/models/classifiers.py): label counts
#: distinct from every other dim, named labels so id2label is visible in the package
HEADS = {"seq-cls": ("ForSequenceClassification", ["NEGATIVE", "NEUTRAL", "POSITIVE"]),
         "tok-cls": ("ForTokenClassification", ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"])}

# Image families (mobius/models/vit.py, dinov2.py, siglip.py, clip_models.py): 32 px
# images, 8 px patches (16 patches), vision hidden 48 (4 heads of 12), MLP 100 (DINOv2:
# mlp_ratio 2 -> 96), 7 labels; the zero-shot text towers: hidden 32 (2 heads of 16),
# MLP 88, 24 positions, projection 40 (CLIP; SigLIP's text head maps to the vision width).
VISION = {"hidden_size": 48, "intermediate_size": 100, "num_hidden_layers": 2,
          "num_attention_heads": 4, "num_channels": 3, "image_size": 32, "patch_size": 8}
_IMAGE_LABELS = ["tabby", "tiger", "lion", "lynx", "puma", "ocelot", "serval"]
IMAGE_LABELS = {"id2label": {str(i): name for i, name in enumerate(_IMAGE_LABELS)},
                "label2id": {name: i for i, name in enumerate(_IMAGE_LABELS)}}
TEXT = {"vocab_size": VOCAB_SIZE, "hidden_size": 32, "intermediate_size": 88,
        "num_hidden_layers": 2, "num_attention_heads": 2, "max_position_embeddings": 24}


def classifier_heads(name: str, base: dict, prefix: str) -> dict[str, dict]:
    """<name>-seq-cls and <name>-tok-cls: the encoder preset ``base`` under each head."""
    return {f"{name}-{kind}": {**base, "architectures": [prefix + suffix],
                               "id2label": {str(i): label for i, label in enumerate(labels)},
                               "label2id": {label: i for i, label in enumerate(labels)}}
            for kind, (suffix, labels) in HEADS.items()}


def masked_lm_head(name: str, base: dict, prefix: str) -> dict[str, dict]:
    """<name>-mlm: the encoder preset ``base`` under its masked-LM head."""
    return {f"{name}-mlm": {**base, "architectures": [prefix + "ForMaskedLM"]}}
