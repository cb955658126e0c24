"""The "single_pass" reference runner (Task.reference.runner): one forward of a
right-padded batch through an encoder package (feature extraction, text- and
token-classification) and through transformers (or sentence-transformers, for
checkpoints that carry its pooling), compared on every output the package has,
per-token outputs at real (non-padding) positions only.

``record`` runs the transformers side (torch) and ``save`` / ``load`` keep it as an .npz,
so that a test compares its package against outputs recorded at build time (the
reference_cases rule, //rules:references.bzl) without importing torch.
"""

from __future__ import annotations

import dataclasses
import json
import os

import numpy as np

from testing import parity

TOKEN_TYPES = "token_type_ids"


@dataclasses.dataclass
class EncoderRun:
    diffs: dict  # output name -> max |onnx - reference|
    onnx: dict  # output name -> float32 array
    reference: dict
    feeds: dict


@dataclasses.dataclass(frozen=True)
class EncoderReference:
    feeds: dict  # text_batch's feeds, token_type_ids included
    #: "untyped": transformers' outputs by name without token_type_ids; "typed": with them
    #: (only for models with two or more token types)
    outputs: dict


def text_batch(vocab_size: int, pad_token_id: int, seq: int = 9, pad: int = 3,
               seed: int = 0) -> dict[str, np.ndarray]:
    """Two rows of ``seq`` tokens, row 1 right-padded by ``pad`` (as tokenizers pad
    encoder batches), and random token types (fed where the graph takes them)."""
    rng = np.random.default_rng(seed)
    input_ids = rng.integers(4, vocab_size, size=(2, seq), dtype=np.int64)
    attention_mask = np.ones((2, seq), np.int64)
    attention_mask[1, seq - pad:] = 0
    input_ids[1, seq - pad:] = pad_token_id
    token_types = (rng.integers(0, 2, size=(2, seq)) * attention_mask).astype(np.int64)
    return {"input_ids": input_ids, "attention_mask": attention_mask, TOKEN_TYPES: token_types}


def run_onnx(session, feeds: dict) -> dict[str, np.ndarray]:
    names = [o.name for o in session.get_outputs()]
    return {n: np.asarray(v).astype(np.float32)
            for n, v in zip(names, parity.run_session(session, feeds))}


def run_reference(folder: str, feeds: dict) -> dict[str, np.ndarray]:
    """Every tensor output of the family task's transformers auto class (last_hidden_state,
    logits, ...), or of the SentenceTransformer the folder describes."""
    import torch

    tensors = {k: torch.from_numpy(v) for k, v in feeds.items()}
    with torch.no_grad():
        if os.path.isfile(os.path.join(folder, "modules.json")):
            from sentence_transformers import SentenceTransformer

            model = SentenceTransformer(folder, device="cpu").eval()
            out = model(dict(tensors))
            return {"last_hidden_state": out["token_embeddings"].float().numpy(),
                    "sentence_embedding": out["sentence_embedding"].float().numpy()}
        from testing.hf_checkpoints import load_hf_model

        out = load_hf_model(folder)(**tensors)
        return {name: value.float().numpy() for name, value in out.items()
                if isinstance(value, torch.Tensor)}


def record(folder: str, seq: int = 9, pad: int = 3, seed: int = 0) -> EncoderReference:
    """transformers' outputs on text_batch (sized by the folder's config.json), without
    token types, and with them where the model has two or more (type_vocab_size)."""
    with open(os.path.join(folder, "config.json")) as f:
        raw = json.load(f)
    feeds = text_batch(raw["vocab_size"], raw.get("pad_token_id") or 0, seq, pad, seed)
    untyped = {k: v for k, v in feeds.items() if k != TOKEN_TYPES}
    outputs = {"untyped": run_reference(folder, untyped)}
    if (raw.get("type_vocab_size") or 0) > 1:
        outputs["typed"] = run_reference(folder, feeds)
    return EncoderReference(feeds, outputs)


def save(reference: EncoderReference, path: str) -> str:
    arrays = {f"feed:{k}": v for k, v in reference.feeds.items()}
    arrays.update({f"{run}:{name}": value for run, values in reference.outputs.items()
                   for name, value in values.items()})
    np.savez(path, **arrays)
    return path


def load(path: str) -> EncoderReference:
    feeds, outputs = {}, {}
    with np.load(path) as data:
        for key in data.files:
            run, name = key.split(":", 1)
            (feeds if run == "feed" else outputs.setdefault(run, {}))[name] = data[key]
    return EncoderReference(feeds, outputs)


def encoder_parity(session, reference: EncoderReference, config, seq: int = 9, pad: int = 3,
                   seed: int = 0) -> EncoderRun:
    """The package's outputs on the recorded batch (which must be text_batch for
    ``config``), each against transformers' run fed the same inputs."""
    expected = text_batch(config.vocab_size, config.pad_token_id or 0, seq, pad, seed)
    for name, value in expected.items():
        np.testing.assert_array_equal(reference.feeds[name], value, err_msg=name)
    typed = TOKEN_TYPES in {i.name for i in session.get_inputs()}
    feeds = {k: v for k, v in reference.feeds.items() if typed or k != TOKEN_TYPES}
    onnx_out = run_onnx(session, feeds)
    outputs = reference.outputs["typed" if typed else "untyped"]
    real = feeds["attention_mask"].astype(bool)
    diffs = {}
    for name, value in onnx_out.items():
        ref = outputs[name]
        assert value.shape == ref.shape, (name, value.shape, ref.shape)
        delta = np.abs(value - ref)  # per-token outputs [batch, seq, ...]: real tokens only
        diffs[name] = float((delta[real] if delta.ndim == 3 else delta).max())
    return EncoderRun(diffs, onnx_out, {n: outputs[n] for n in onnx_out}, feeds)


def save_sentence_transformer(hf_folder: str, out: str, modes: tuple[str, ...],
                              normalize: bool) -> str:
    """A sentence-transformers model (modules.json, 1_Pooling, [2_Normalize]) around the
    transformers checkpoint in ``hf_folder``, saved by sentence-transformers itself."""
    import shutil

    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer

    transformer = Transformer(hf_folder)
    pooling = Pooling(transformer.get_embedding_dimension(), pooling_mode=list(modes))
    modules = [transformer, pooling] + ([Normalize()] if normalize else [])
    SentenceTransformer(modules=modules, device="cpu").save(out)
    for name in os.listdir(hf_folder):  # the tiny tokenizer files, if the save left any out
        if name.startswith("tokenizer") and not os.path.exists(os.path.join(out, name)):
            shutil.copy(os.path.join(hf_folder, name), out)
    return out
