"""Runs Optimum's ORTModelFor* classes on mobius packages, in a process of its own.

optimum-onnx 0.1.0 (Hugging Face's release) needs transformers < 4.58, so ./bazelw
installs it with that transformers into $MOBIUS_OPTIMUM_SITE (requirements-optimum.txt),
put first on this process' path; the test process keeps the pinned transformers 5.
(The transformers-5 fork optimum-onnx-naf 0.1.1 in requirements.txt loads these
classes, but its ``generate`` fails under transformers 5.24: ORTModelForCausalLM has
no ``is_remote_code`` and transformers now passes the cache as ``cache``.)

Usage: ``python3 optimum_client.py JOBS.json``. Each job loads ``folder`` with
``ORTModelFor<class>`` exactly as a user would, runs it on the arrays of ``feeds``
(an .npz) and writes ``result`` (.npz: the ``output`` array; for a generator
``generated`` tokens and ``scores``, each step's logits, from the feeds less
``decoder_input_ids``) or, where Optimum raises, ``result``.error (its message). A job
with ``head_dim`` sets the model's cache head size, the one attribute Optimum
derives wrongly for a model whose head_dim is not hidden_size / heads (qwen3).
A job with ``page`` runs that code in ``folder`` and saves its ``outputs``.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys

import numpy as np


def run(job: dict) -> dict:
    import torch
    import optimum.onnxruntime as ort

    if "page" in job:
        os.chdir(job["folder"])
        namespace: dict = {}
        exec(compile(job["page"], "docs/clients/optimum.md", "exec"), namespace)
        return {"generated": namespace["outputs"].numpy()}
    model = getattr(ort, "ORTModelFor" + job["class"]).from_pretrained(job["folder"])
    if job.get("head_dim"):
        model.embed_size_per_head = job["head_dim"]
    with np.load(job["feeds"]) as data:
        feeds = {k: torch.from_numpy(data[k]) for k in data.files}
    with torch.no_grad():
        arrays = {job["output"]: model(**feeds)[job["output"]].numpy()}
        if job.get("generate"):  # from the source alone (an encoder-decoder starts its own)
            feeds.pop("decoder_input_ids", None)
            run = model.generate(**feeds, max_new_tokens=job["generate"],
                                 min_new_tokens=job["generate"], do_sample=False,
                                 output_scores=True, return_dict_in_generate=True)
            arrays["generated"] = run.sequences.numpy()
            arrays["scores"] = torch.stack(run.scores).numpy()
    return arrays


def main(jobs_path: str) -> None:
    with open(jobs_path) as f:
        jobs = json.load(f)
    for job in jobs:
        try:
            with contextlib.redirect_stdout(sys.stderr):
                arrays = run(job)
        except Exception as e:  # the client's failure is the job's result
            with open(job["result"] + ".error", "w") as f:
                f.write(f"{type(e).__name__}: {e}")
            continue
        np.savez(job["result"], **arrays)


if __name__ == "__main__":
    main(sys.argv[1])
