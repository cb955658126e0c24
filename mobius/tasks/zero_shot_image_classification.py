"""zero-shot-image-classification (CLIP, SigLIP): text and vision towers in ONE graph.

Inputs: input_ids int64 [text_batch_size, sequence_length] (the candidate labels
as prompts), attention_mask int64 (same dims; CLIP only: SigLIP's text tower
reads no mask, its processor pads to max_length), pixel_values [batch_size,
channels, image_size, image_size]. Outputs: logits_per_image [batch_size,
text_batch_size], text_embeds [text_batch_size, projection] and image_embeds
[batch_size, projection], L2-normalized, as CLIPModel / SiglipModel return them.

Why one graph and not a text + vision two-model package: the zero-shot pipeline
(and CLIPModel.forward) scores images against a handful of label prompts in one
call, and logits_per_image needs both embeddings plus the checkpoint's
logit_scale / logit_bias, which would otherwise have to leave the package as
loose numbers for the caller to apply. One session keeps the whole score inside
the model, as transformers computes it; a caller who wants only one side's
embeddings still gets them (text_embeds, image_embeds) from the same run. The
package carries preprocessor_config.json and the tokenizer; it is for plain
onnxruntime.
"""

from __future__ import annotations

from mobius.roles import ENCODER
from mobius.tasks import image_processor
from mobius.tasks.image import NAMED_DIMS, build_image_model, image_io
from mobius.tasks.task import Reference, Task

TASK = Task(
    name="zero-shot-image-classification",
    summary="image-text similarity: logits_per_image, text/image embeddings (onnxruntime)",
    build=build_image_model,
    roles={"model": ENCODER},
    io=image_io,
    named_dims=NAMED_DIMS,
    reference=Reference(auto_class="AutoModel", runner="image_pass",
                        inputs=("input_ids", "attention_mask", "pixel_values"),
                        outputs=("logits_per_image", "text_embeds", "image_embeds")),
    read_extras=image_processor.read_extras,
    processor_files=image_processor.processor_files,
)
