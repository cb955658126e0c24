"""The "single_pass" reference runner (Task.reference.runner): one forward of a
right-padded batch through an encoder package (feature extraction, text- and
token-classification) and through transformers (or sentence-transformers, for
checkpoints that carry its pooling), compared on every output the package has,
per-token outputs at real (non-padding) positions only.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np

from testing import parity


@dataclasses.dataclass
class EncoderRun:
    diffs: dict  # output name -> max |onnx - reference|
    onnx: dict  # output name -> float32 array
    reference: dict
    feeds: dict


def text_batch(session, vocab_size: int, pad_token_id: int, seq: int = 9, pad: int = 3,
               seed: int = 0) -> dict[str, np.ndarray]:
    """Two rows of ``seq`` tokens, row 1 right-padded by ``pad`` (as tokenizers pad
    encoder batches); random token types where the graph takes them."""
    rng = np.random.default_rng(seed)
    input_ids = rng.integers(4, vocab_size, size=(2, seq), dtype=np.int64)
    attention_mask = np.ones((2, seq), np.int64)
    attention_mask[1, seq - pad:] = 0
    input_ids[1, seq - pad:] = pad_token_id
    feeds = {"input_ids": input_ids, "attention_mask": attention_mask}
    if "token_type_ids" in {i.name for i in session.get_inputs()}:
        feeds["token_type_ids"] = (rng.integers(0, 2, size=(2, seq)) * attention_mask).astype(
            np.int64)
    return feeds


def run_onnx(session, feeds: dict) -> dict[str, np.ndarray]:
    names = [o.name for o in session.get_outputs()]
    return {n: np.asarray(v).astype(np.float32)
            for n, v in zip(names, parity.run_session(session, feeds))}


def run_reference(folder: str, feeds: dict, names) -> dict[str, np.ndarray]:
    """The outputs ``names`` of the family task's transformers auto class (last_hidden_state,
    logits), or of the SentenceTransformer the folder describes."""
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
        return {name: getattr(out, name).float().numpy() for name in names}


def encoder_parity(session, folder: str, config, seq: int = 9, pad: int = 3,
                   seed: int = 0) -> EncoderRun:
    feeds = text_batch(session, config.vocab_size, config.pad_token_id or 0, seq, pad, seed)
    onnx_out = run_onnx(session, feeds)
    reference = run_reference(folder, feeds, list(onnx_out))
    real = feeds["attention_mask"].astype(bool)
    diffs = {}
    for name, value in onnx_out.items():
        ref = reference[name]
        assert value.shape == ref.shape, (name, value.shape, ref.shape)
        delta = np.abs(value - ref)  # per-token outputs [batch, seq, ...]: real tokens only
        diffs[name] = float((delta[real] if delta.ndim == 3 else delta).max())
    return EncoderRun(diffs, onnx_out, reference, feeds)


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
