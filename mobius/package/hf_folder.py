"""The Hugging Face model-folder files every package layout carries.

Clients recognise a model folder by its configs, not by its ONNX files:
transformers' Auto classes and Optimum's library inference read
``config.json``, pipelines read ``generation_config.json`` and the processor
configs, and ``SentenceTransformer(folder, backend="onnx")`` /
``CrossEncoder(...)`` read ``modules.json`` and the module folders it names
(``1_Pooling/config.json``, ...), ``sentence_bert_config.json`` (its
``max_seq_length``) and ``config_sentence_transformers.json`` (prompts,
similarity function). These are copied byte for byte from the checkpoint, so
nothing the checkpoint states is lost to a re-serialization; a GGUF source has
no config.json, so the package gets the one mobius read from its metadata
(transformers' own GGUF mapping). A file a task writes itself (an image
processor config fitted to the graph) takes precedence over the checkpoint's.
"""

from __future__ import annotations

import json
import os
import shutil
from typing import Any

from mobius.checkpoint_files import contained_file
from mobius.errors import ConfigError

#: the model's configs (config.json first: it names the architecture)
CONFIG_FILES = ("config.json", "generation_config.json", "preprocessor_config.json",
                "processor_config.json")
#: sentence-transformers' files beside config.json
SENTENCE_TRANSFORMERS_FILES = ("modules.json", "sentence_bert_config.json",
                               "config_sentence_transformers.json")
#: the largest file a sentence-transformers module folder may hand over (configs, not weights)
_MODULE_FILE_BYTES = 1 << 20


def model_folder_files(folder: str, sentence_transformers: bool) -> list[str]:
    """The checkpoint's model-folder files, relative to ``folder``, that a package carries:
    its configs and, where ``sentence_transformers`` (the task is one sentence-transformers
    loads) and the checkpoint has ``modules.json``, that pipeline's files and module folders."""
    names = [n for n in CONFIG_FILES if os.path.isfile(contained_file(folder, n, "the checkpoint"))]
    modules = contained_file(folder, "modules.json", "the checkpoint")
    if sentence_transformers and os.path.isfile(modules):
        names += [n for n in SENTENCE_TRANSFORMERS_FILES
                  if os.path.isfile(contained_file(folder, n, "the checkpoint"))]
        for module in _module_folders(folder, modules):
            names += _module_files(folder, module)
    return names


def _module_folders(folder: str, modules_path: str) -> list[str]:
    """The module folders modules.json names (the Transformer's own "" excluded)."""
    with open(modules_path, encoding="utf-8") as f:
        try:
            modules = json.load(f)
        except json.JSONDecodeError as e:
            raise ConfigError(f"{modules_path}: not valid JSON ({e.msg})") from None
    if not isinstance(modules, list) or not all(isinstance(m, dict) for m in modules):
        raise ConfigError(f"{modules_path}: expected a list of modules")
    return [str(m["path"]) for m in modules if m.get("path")]


def _module_files(folder: str, module: str) -> list[str]:
    """The regular files of one module folder (a missing folder holds none: sentence-transformers
    builds a Normalize without one); the folder and each file must stay inside the checkpoint."""
    module = os.path.normpath(module)
    root = os.path.realpath(folder)
    path = os.path.realpath(os.path.join(root, module))
    if os.path.isabs(module) or module.split(os.sep)[0] == ".." or (
            os.path.commonpath([root, path]) != root):
        raise ConfigError(f"modules.json names folder {module!r} outside the checkpoint")
    if not os.path.isdir(path):
        return []
    names = []
    for entry in sorted(os.listdir(path)):
        name = f"{module}/{entry}"
        full = contained_file(folder, name, "modules.json", ConfigError)
        if not os.path.isfile(full):
            continue
        if os.path.getsize(full) > _MODULE_FILE_BYTES:
            raise ConfigError(f"{name}: a sentence-transformers module with weights "
                              f"(Dense, ...) is not supported")
        names.append(name)
    return names


def write_model_folder(package, folder: str, written: set[str]) -> None:
    """Copies ``package.model_files`` from its source into ``folder`` (the names in
    ``written`` excepted: the layout wrote its own), then writes the configs a source
    without files has (``package.hf_configs``: a GGUF's config.json)."""
    copied = set(written)
    for name in package.model_files:
        if name in copied:
            continue
        target = os.path.join(folder, name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(os.path.join(package.source, name), target)
        copied.add(name)
    for name in ("config.json", "generation_config.json"):
        content: dict[str, Any] = package.hf_configs.get(name) or {}
        if name not in copied and content:
            with open(os.path.join(folder, name), "w") as f:
                json.dump(content, f, indent=2)
