"""The task registry: Hugging Face pipeline tag -> Task. Adding a task is one file
under mobius/tasks and one line here."""

from __future__ import annotations

from mobius.tasks import (causal_lm, ctc, encoder, fill_mask, speech_seq2seq, text_classification,
                          token_classification, vision_language)
from mobius.tasks import image_classification, image_feature_extraction
from mobius.tasks import zero_shot_image_classification
from mobius.tasks import text2text
from mobius.tasks.task import Task

TASKS: dict[str, Task] = {task.name: task for task in (
    causal_lm.TASK,
    encoder.TASK,
    text_classification.TASK,
    token_classification.TASK,
    fill_mask.TASK,
    vision_language.TASK,
    speech_seq2seq.TASK,
    image_classification.TASK,
    image_feature_extraction.TASK,
    zero_shot_image_classification.TASK,
    ctc.TASK,
    text2text.TASK,
)}


def get_task(task: str | Task) -> Task:
    """The registered task of that name (a Task is returned as is)."""
    if isinstance(task, Task):
        return task
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; supported: {', '.join(TASKS)}")
    return TASKS[task]
