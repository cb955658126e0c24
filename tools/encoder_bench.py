"""CPU latency of a BERT-base-shaped encoder, with and without MultiHeadAttentionFusion.

Writes a random-weight bert-base checkpoint (hidden 768, 12 layers, 12 heads,
MLP 3072, vocab 30522) under --workdir, builds it twice for the cpu EP: as is
(attention fused into com.microsoft MultiHeadAttention) and with the EP's
``mha_dtypes`` emptied (standard Attention, every other fusion the same). Then
times one forward pass of plain onnxruntime on a padded batch, the two
sessions alternating, and prints the medians as JSON.

    python3 tools/encoder_bench.py --batch 8 --seq 128 --repeat 20
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import statistics
import sys
import time

if __package__ in (None, ""):
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

BERT_BASE = {
    "model_type": "bert", "architectures": ["BertModel"], "vocab_size": 30522,
    "hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12,
    "num_attention_heads": 12, "max_position_embeddings": 512, "type_vocab_size": 2,
    "hidden_act": "gelu", "layer_norm_eps": 1e-12, "pad_token_id": 0,
}


def write_checkpoint(folder: str) -> str:
    """The random bert-base checkpoint (kept between runs)."""
    from mobius.tiny.checkpoint import random_weights, write_tiny_preprocessors
    from mobius.weights.safetensors_writer import write_safetensors

    if os.path.isfile(os.path.join(folder, "model.safetensors")):
        return folder
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(BERT_BASE, f, indent=2)
    write_safetensors(os.path.join(folder, "model.safetensors"), random_weights(BERT_BASE, 0))
    write_tiny_preprocessors(folder, BERT_BASE)
    return folder


def build_variants(checkpoint: str, workdir: str) -> dict[str, str]:
    """cpu EP packages: "fused" (MultiHeadAttention) and "unfused" (standard Attention)."""
    import mobius
    from mobius.ep.registry import get_ep

    cpu = get_ep("cpu")
    variants = {"fused": cpu,
                "unfused": dataclasses.replace(cpu, name="cpu-no-mha", mha_dtypes=frozenset())}
    paths = {}
    for label, caps in variants.items():
        out = os.path.join(workdir, label)
        mobius.build(checkpoint, execution_provider=caps).save(out, overwrite=True)
        paths[label] = os.path.join(out, "model.onnx")
    return paths


def time_sessions(paths: dict[str, str], batch: int, seq: int, repeat: int,
                  threads: int) -> dict[str, dict]:
    import numpy as np
    import onnxruntime as ort

    rng = np.random.default_rng(0)
    ids = rng.integers(1000, 30000, (batch, seq)).astype(np.int64)
    mask = np.ones_like(ids)
    for row in range(batch):  # row r right-padded by r * seq / (2 * batch) tokens
        pad = row * seq // (2 * batch)
        if pad:
            mask[row, -pad:], ids[row, -pad:] = 0, 0
    feeds = {"input_ids": ids, "attention_mask": mask, "token_type_ids": np.zeros_like(ids)}
    options = ort.SessionOptions()
    options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
    sessions = {k: ort.InferenceSession(p, options, providers=["CPUExecutionProvider"])
                for k, p in paths.items()}
    outputs = {k: s.run(None, feeds)[0] for k, s in sessions.items()}  # warm-up
    times = {k: [] for k in sessions}
    cpu = {k: [] for k in sessions}  # process CPU time: steadier than wall on a shared machine
    for _ in range(repeat):
        for label, session in sessions.items():
            start, start_cpu = time.perf_counter(), time.process_time()
            session.run(None, feeds)
            times[label].append(1000 * (time.perf_counter() - start))
            cpu[label].append(1000 * (time.process_time() - start_cpu))
    real = mask.astype(bool)
    diff = float(np.abs(outputs["fused"] - outputs["unfused"])[real].max())
    return {label: {"median_ms": round(statistics.median(t), 1),
                    "min_ms": round(min(t), 1), "max_ms": round(max(t), 1),
                    "median_cpu_ms": round(statistics.median(cpu[label]), 1)}
            for label, t in times.items()} | {"max_abs_diff": diff}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", default=os.path.expanduser("~/.cache/mobius/encoder_bench"))
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args(argv)
    checkpoint = write_checkpoint(os.path.join(args.workdir, "bert-base-random"))
    paths = build_variants(checkpoint, args.workdir)
    result = time_sessions(paths, args.batch, args.seq, args.repeat, args.threads)
    result.update(batch=args.batch, seq=args.seq, threads=args.threads, repeat=args.repeat,
                  load_average=[round(x, 1) for x in os.getloadavg()])
    print(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
