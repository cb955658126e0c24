"""image-classification: a vision transformer with a classification head.

Input: pixel_values [batch_size, channels, image_size, image_size] (build dtype).
Output: logits [batch_size, num_labels]; config.json's id2label goes into the
model's metadata (mobius/tasks/labels.py). The package carries
preprocessor_config.json and is for plain onnxruntime
(docs/examples/image_classification.py).
"""

from __future__ import annotations

from mobius.roles import ENCODER
from mobius.tasks import image_processor
from mobius.tasks.image import NAMED_DIMS, build_image_model, image_io
from mobius.tasks.labels import label_metadata
from mobius.tasks.task import Reference, Task

TASK = Task(
    name="image-classification",
    summary="image classifier logits, id2label metadata, image processor (onnxruntime)",
    build=build_image_model,
    roles={"model": ENCODER},
    io=image_io,
    named_dims=NAMED_DIMS,
    reference=Reference(auto_class="AutoModelForImageClassification", runner="image_pass",
                        inputs=("pixel_values",), outputs=("logits",)),
    read_extras=image_processor.read_extras,
    processor_files=image_processor.processor_files,
    metadata=lambda config: label_metadata(config.raw),
)
