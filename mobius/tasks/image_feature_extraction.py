"""image-feature-extraction: a vision transformer's hidden states.

Input: pixel_values [batch_size, channels, image_size, image_size] (build dtype).
Outputs, as transformers' vision model returns them: last_hidden_state
[batch_size, tokens, hidden] and, where the family has one, pooler_output
[batch_size, hidden] (ViT's tanh pooler, DINOv2's and CLIP's normed class token,
SigLIP's attention-pooling head). The package carries preprocessor_config.json
and is for plain onnxruntime.
"""

from __future__ import annotations

from mobius.roles import ENCODER
from mobius.tasks import image_processor
from mobius.tasks.image import NAMED_DIMS, build_image_model, image_io
from mobius.tasks.task import Reference, Task

TASK = Task(
    name="image-feature-extraction",
    summary="vision encoder hidden states and pooled output, image processor (onnxruntime)",
    build=build_image_model,
    roles={"model": ENCODER},
    io=image_io,
    named_dims=NAMED_DIMS,
    reference=Reference(auto_class="AutoModel", runner="image_pass", inputs=("pixel_values",),
                        outputs=("last_hidden_state", "pooler_output")),
    read_extras=image_processor.read_extras,
    processor_files=image_processor.processor_files,
)
