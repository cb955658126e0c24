"""The task registry: Hugging Face pipeline tag -> Task.

A task is one module of mobius.tasks defining ``TASK = Task(...)``; the registry discovers it
(module-name order), so adding one touches its file and its test only. Bazel cannot import
Python: //tools:tasks writes the task modules' targets into rules/tasks.bzl.
"""

from __future__ import annotations

import importlib
import pkgutil
from types import ModuleType

from mobius import tasks
from mobius.tasks.task import Task

#: test-side modules that sit beside the tasks
_TEST_SUFFIXES = ("_test", "_cases")


def task_modules() -> tuple[ModuleType, ...]:
    """Every module of mobius.tasks that defines TASK (a Task), by name; the others are the
    tasks' helpers."""
    names = sorted(info.name for info in pkgutil.iter_modules(tasks.__path__)
                   if not info.name.endswith(_TEST_SUFFIXES) and info.name != "registry")
    modules = (importlib.import_module(f"{tasks.__name__}.{name}") for name in names)
    return tuple(m for m in modules if isinstance(getattr(m, "TASK", None), Task))


TASKS: dict[str, Task] = {module.TASK.name: module.TASK for module in task_modules()}


def get_task(task: str | Task) -> Task:
    """The registered task of that name (a Task is returned as is)."""
    if isinstance(task, Task):
        return task
    if task not in TASKS:
        raise ValueError(f"unknown task {task!r}; supported: {', '.join(TASKS)}")
    return TASKS[task]
