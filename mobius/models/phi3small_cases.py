"""The torch side of phi3small_test (the reference_cases rule runs it at build time,
//rules:references.bzl).

transformers has no Phi-3-small class (the hub checkpoints ship modeling_phi3_small.py
and a Triton block-sparse kernel as auto_map code, which no test runs), so each checkpoint
is written in the hub layout by testing/hf_checkpoints.make_hf_checkpoint (mobius' numpy
writer: every tensor random, biases included), and the reference is
testing/phi3small_reference.py (transformers' Llama with Phi-3-small's parts and the
block-sparse layout put in). Each case: ckpt/, padded.npz + unpadded.npz
(testing/checkpoint_runs.py) and transformers.json (greedy tokens for the genai test).

The ``peer`` case is the ``sparse`` checkpoint built by ORT GenAI's builder too (peer/,
``-p fp32 -e cpu``): the builder loads the checkpoint's auto_map code, here the module
tree of testing/phi3small_hub_tree.py. Its LayerNorms take epsilon 1e-6 whatever
``layer_norm_epsilon`` says (it reads ``rms_norm_eps``, else 1e-6), so this checkpoint
says 1e-6.
"""

from __future__ import annotations

import inspect
import os
import runpy
import shutil
import sys
import tempfile

PRESET = "tiny-phi3small"
NEW_TOKENS = 12
PROMPTS = [[17, 93, 251, 407, 12, 999, 64, 5], [311, 28, 777]]  # no pad (0) / bos / eos ids

#: case -> config overrides of the preset (layer 0 block-sparse per head, layer 1 dense)
CONFIGS: dict[str, dict] = {
    "sparse": {},
    "homo_untied": {"blocksparse_homo_head_pattern": True, "tie_word_embeddings": False,
                    "mup_use_scaling": False, "mup_attn_multiplier": 40.0,
                    "layer_norm_epsilon": 0.5,
                    "blocksparse_vert_stride": 2},
    # the 10-token prompts run past original_max_position_embeddings 8: the long factors
    "longrope": {"rope_scaling": {"type": "su", "short_factor": [1.0, 1.5, 2.0, 1.0, 1.2, 3.0,
                                                                 1.1, 1.0],
                                  "long_factor": [2.0, 3.0, 1.5, 4.0, 2.5, 1.0, 6.0, 2.0]},
                 "max_position_embeddings": 200, "original_max_position_embeddings": 8,
                 "ff_intermediate_size": None, "ff_dim_multiplier": 2,
                 "gegelu_pad_to_256": False},
}
PEER = "peer"
CASES = sorted(CONFIGS) + [PEER]


def write_case(case: str, folder: str) -> None:
    from testing import checkpoint_runs, genai_harness
    from testing.hf_checkpoints import make_hf_checkpoint
    from testing.phi3small_reference import phi3small_reference

    if case == PEER:
        _write_peer(folder)
        return
    checkpoint = make_hf_checkpoint(os.path.join(folder, "ckpt"), PRESET, seed=7,
                                    **CONFIGS[case])
    checkpoint_runs.record(phi3small_reference(checkpoint), folder)
    genai_harness.record_hf_generate(os.path.join(folder, "transformers.json"),
                                     phi3small_reference(checkpoint), PROMPTS, NEW_TOKENS)


def _write_peer(folder: str) -> None:
    """ckpt/ (the sparse case at epsilon 1e-6, with the module tree as its auto_map code)
    and peer/ (``python -m onnxruntime_genai.models.builder -p fp32 -e cpu``, run in this
    process with HF_HOME in a scratch folder)."""
    from testing import phi3small_hub_tree
    from testing.hf_checkpoints import make_hf_checkpoint

    checkpoint = make_hf_checkpoint(os.path.join(folder, "ckpt"), PRESET, seed=7,
                                    layer_norm_epsilon=1e-6)
    source = inspect.getsourcefile(phi3small_hub_tree)
    for name in ("configuration_phi3_small.py", "modeling_phi3_small.py"):
        shutil.copyfile(source, os.path.join(checkpoint, name))
    scratch = tempfile.mkdtemp(prefix="peer-")
    saved_argv, saved_home = sys.argv, os.environ.get("HF_HOME")
    os.environ["HF_HOME"] = os.path.join(scratch, "hf")
    sys.argv = ["builder", "-i", checkpoint, "-o", os.path.join(folder, "peer"), "-p", "fp32",
                "-e", "cpu", "-c", os.path.join(scratch, "cache"),
                "--extra_options", "hf_remote=true"]
    try:
        runpy.run_module("onnxruntime_genai.models.builder", run_name="__main__", alter_sys=True)
    finally:
        sys.argv = saved_argv
        if saved_home is None:
            os.environ.pop("HF_HOME")
        else:
            os.environ["HF_HOME"] = saved_home
        shutil.rmtree(scratch)
