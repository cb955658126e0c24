"""Shared machinery of the per-EP test suites under ep/<name>/.

Each EP folder holds one test file of its own, and ep_suite() (rules/ep_suite.bzl) runs two
shared ones for it, naming the EP in $MOBIUS_EP (:func:`suite_ep`):

* ``<ep>_fusion_test.py`` (L2): an expectation table -- *data* -- mapping the
  EP's build dtypes to :class:`Check` objects (testing/ep_checks.py), applied
  to every model family.
* ``ep/parity_test.py`` (L3): the EP graph against the generic ("default")
  graph on onnxruntime's CPU EP (see testing/ep_parity.py).
* ``ep/golden_test.py`` (L5): op-histogram snapshots (see testing/golden.py).

Checkpoints are tiny random models written by transformers itself
(testing/hf_checkpoints.py), one per family (see :class:`Checkpoints`); graphs are
built with ``mobius.build`` exactly as the CLI does (under Bazel, once by the
``ep_builds`` action), and cached per (family, EP, dtype) for the test process.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import warnings
from collections import Counter
from typing import Callable, Iterable

import onnx
import onnx_ir as ir
import pytest

from mobius.ep.registry import ep_registry, get_ep
from mobius.models.registry import FAMILIES
from mobius.roles import DECODER, ENCODER
from mobius.weights.dtypes import SHORT_NAMES
# The L2 vocabulary (testing/ep_checks.py), re-exported: the ep/<name> tables read it as s.<name>.
from testing.ep_checks import (  # noqa: F401
    GQA, MHA, ROTARY_OPS, SKIP_LAYER_NORM, SKIP_SIMPLIFIED, Absent, BiasedFused, Check,
    CustomOpsHaveFunctions, GqaAttribute, NoGqaWarning, NoInt64Inputs, PerLayer, QkvPacked,
    Replaced, ResidualNormsFused, RopeAbsorbed, SameCountAsGeneric, StandardDomainOnly, StaticIO,
    all_nodes,
    attribute, is_constant, op_histogram, op_key,
)


def expected_dtypes(ep: str) -> set[str]:
    """The dtypes an EP is tested with, from the registry: its GQA dtypes plus f32 where it
    builds f32; every dtype for the EPs without GQA."""
    caps = get_ep(ep)
    if not caps.gqa_dtypes:
        return {SHORT_NAMES[d] for d in caps.dtypes}
    return {SHORT_NAMES[d] for d in set(caps.gqa_dtypes) | ({ir.DataType.FLOAT} & caps.dtypes)}


def _suite_dtypes(ep: str) -> tuple[str, ...]:
    """expected_dtypes, the EP's primary (golden) dtype first (EpCapabilities.primary_dtype)."""
    primary = SHORT_NAMES[get_ep(ep).primary_dtype]
    rest = [d for d in ("f32", "f16", "bf16") if d != primary and d in expected_dtypes(ep)]
    return (primary, *rest)


def suite_ep() -> str:
    """The EP a shared suite file (ep/parity_test.py, ep/golden_test.py) tests: $MOBIUS_EP,
    which ep_suite() sets (outside Bazel: MOBIUS_EP=cpu python -m pytest ep/parity_test.py)."""
    name = os.environ.get("MOBIUS_EP")
    if not name:
        raise RuntimeError("set MOBIUS_EP to the EP this suite tests, e.g. MOBIUS_EP=cpu; "
                           f"built-in EPs: {', '.join(ep_registry.names())}")
    return get_ep(name).name


#: The dtypes each built-in EP is tested with, primary (golden) dtype first.
EP_DTYPES: dict[str, tuple[str, ...]] = {ep: _suite_dtypes(ep) for ep in ep_registry.names()}


#: The quantized build each golden suite checks beside the float one (ep/int4_checks.py).
GOLDEN_QUANT = "int4"


def takes_golden_quant(ep: str) -> bool:
    """Whether the EP takes GOLDEN_QUANT's weights (qnn takes no quantized form: refused)."""
    return 4 in get_ep(ep).quant_bits


def l1_dtypes(ep: str) -> tuple[str, ...]:
    """Every dtype the EP builds (L1: each build passes the full ONNX checker): EP_DTYPES
    first, then the ones its L2 / L3 tables leave out (the CPU EP's f16 and bf16)."""
    built = sorted(SHORT_NAMES[d] for d in get_ep(ep).dtypes)
    return EP_DTYPES[ep] + tuple(d for d in built if d not in EP_DTYPES[ep])


def primary_dtype(ep: str) -> str:
    return EP_DTYPES[ep][0]


#: The EP whose graphs are the generic ones (every other EP's fusion and parity baseline).
GENERIC_EP = "default"

#: The families (mobius/models/family.py COHORTS) built in every dtype of every EP.
EVERY_DTYPE = "every-dtype"


def in_every_dtype(ep: str, family_name: str) -> bool:
    """Whether the suites build ``family_name`` for ``ep`` in each of the EP's dtypes.

    Every family is built in each EP's primary dtype (and int4), and in every dtype as a
    generic graph (the default EP): that covers each family in each dtype and on each EP.
    An EP's other dtypes are what its dtype-specific rewrites see (casts, GQA or not, MoE
    fused or not): the EVERY_DTYPE cohort shows them, and ep/golden_suite.py checks that the
    cohort holds every op form, task and attention trait of the EP's primary graphs. Every
    family in every dtype on every EP was 3,992 builds, a third of the cold suite's time.
    """
    return ep == GENERIC_EP or EVERY_DTYPE in family(family_name).cohorts


def family_dtypes(ep: str, family_name: str) -> tuple[str, ...]:
    """The EP_DTYPES the L2 / L3 tables check ``family_name`` in for ``ep``."""
    return EP_DTYPES[ep] if in_every_dtype(ep, family_name) else EP_DTYPES[ep][:1]


def l1_family_dtypes(ep: str, family_name: str) -> tuple[str, ...]:
    """The float dtypes ``family_name`` is built in for ``ep`` (each passes the full checker)."""
    return l1_dtypes(ep) if in_every_dtype(ep, family_name) else EP_DTYPES[ep][:1]


def has_causal_decoder(task) -> bool:
    """The task's package holds a causal-LM decoder under the key "model" (what the EP
    expectation tables describe). Its other models (vision tower, embedder) and every
    model of other tasks (encoders, speech seq2seq) only get the role invariant: no
    GroupQueryAttention outside decoders."""
    return task.roles.get("model") == DECODER


def is_encoder(task) -> bool:
    """The task's package is one bidirectional encoder (what ENCODER_EXPECTATIONS describe)."""
    return dict(task.roles) == {"model": ENCODER}


def family_names() -> list[str]:
    """Registered families with a tiny preset (all of them, today)."""
    return [f.name for f in FAMILIES if f.tiny_preset]


def decoder_family_names() -> list[str]:
    """Families whose package is a single causal-LM decoder (text generation)."""
    return [f.name for f in FAMILIES if f.tiny_preset and dict(f.task.roles) == {"model": DECODER}]


def family(name: str):
    for candidate in FAMILIES:
        if candidate.name == name:
            return candidate
    raise KeyError(name)


def ep_family_names(ep: str) -> list[str]:
    """Families whose task the EP serves (``EpCapabilities.tasks``; MLX: text generation)."""
    from mobius.ep.registry import get_ep

    tasks = get_ep(ep).tasks
    return [f for f in family_names() if tasks is None or family(f).task.name in tasks]


def matrix(ep: str, families: Iterable[str] | None = None) -> list[tuple[str, str]]:
    """(family, dtype) pairs of one EP (decoder families by default): family_dtypes."""
    families = decoder_family_names() if families is None else families
    return [(fam, dtype) for fam in families for dtype in family_dtypes(ep, fam)]


def params(pairs: Iterable[tuple[str, str]]) -> list:
    """pytest params for (family, dtype) pairs, sharded by family (see testing/run_pytest.py)."""
    return [pytest.param(fam, dtype, id=f"{fam}-{dtype}", marks=pytest.mark.shard_group(fam))
            for fam, dtype in pairs]


def family_params(families: Iterable[str]) -> list:
    return [pytest.param(fam, id=fam, marks=pytest.mark.shard_group(fam)) for fam in families]


# --------------------------------------------------------------------------
# Checkpoints and builds


class Checkpoints:
    """Tiny transformers checkpoints: the Bazel-built ones (//testing/tiny:hf), else written
    under ``root`` on first use.

    Use one instance per test process (ep/conftest.py's session-scoped fixture), so each
    family's checkpoint is written once.
    """

    def __init__(self, root: str | os.PathLike):
        self.root = str(root)
        self._folders: dict[str, str] = {}

    def folder(self, family_name: str) -> str:
        if family_name not in self._folders:
            from testing.hf_checkpoints import seed0_checkpoint

            self._folders[family_name] = seed0_checkpoint(  # in the suites' data: no torch
                os.path.join(self.root, family_name), family(family_name).tiny_preset)
        return self._folders[family_name]


@dataclasses.dataclass
class Built:
    """One optimized graph: what the L2 / L3 / L5 tests look at."""

    family: str
    ep: str
    dtype: str
    package: object  # mobius ModelPackage
    warnings: list[str]
    quant: str | None = None  # "int4" / "int8" for quantized builds (EP-default options)
    #: model key -> its ONNX bytes: serialized once, or as the ep_builds action stored them
    serialized: dict[str, bytes] = dataclasses.field(default_factory=dict)
    #: model key -> (domain, name) of its local functions, for graphs parsed from the bytes
    #: without the function bodies (_graph_of)
    parsed_functions: dict[str, set] = dataclasses.field(default_factory=dict)

    @property
    def models(self) -> dict[str, ir.Model]:
        if not self.package.models and self.serialized:  # loaded bytes: parsed on first use
            for key, data in self.serialized.items():
                self.package.models[key], self.parsed_functions[key] = _graph_of(data)
        return self.package.models

    def functions(self, key: str | None = None) -> set[tuple[str, str]]:
        """(domain, name) of model ``key``'s (the main model's) local functions."""
        key = key or self.main_key
        model = self.models[key]
        if key in self.parsed_functions:
            return self.parsed_functions[key]
        return {(domain, name) for domain, name, _overload in model.functions}

    def save(self, folder: str) -> str:
        """Writes the package; loaded bytes are parsed whole for it (function bodies too)."""
        loaded = self.parsed_functions or not self.package.models
        models = ({key: ir.serde.deserialize_model(onnx.ModelProto.FromString(data))
                   for key, data in self.serialized.items()} if loaded else self.package.models)
        return dataclasses.replace(self.package, models=models).save(folder)

    @property
    def main_key(self) -> str:
        """"model" (the causal-LM decoder), or the package's first model: its key in both the
        parsed models and the stored bytes (a loaded build holds every model's bytes)."""
        keys = list(self.package.models or self.serialized)
        return "model" if "model" in keys else keys[0]

    def onnx_bytes(self, key: str | None = None) -> bytes:
        """Model ``key``'s (the main model's) ONNX bytes, what onnxruntime sessions load."""
        key = key or self.main_key
        if key not in self.serialized:
            self.serialized[key] = ir.serde.serialize_model(self.models[key]).SerializeToString()
        return self.serialized[key]

    @property
    def roles(self) -> dict[str, str]:
        """Package key -> optimizer role, as the family's task assigns them."""
        return dict(family(self.family).task.roles)

    @property
    def model(self) -> ir.Model:
        """The causal-LM decoder ("model"), or the package's only model."""
        return self.models[self.main_key]

    @property
    def config(self):
        return self.package.config

    @property
    def num_layers(self) -> int:
        """Attention blocks: in a decoder with a cache, the layers with a key cache
        (past_key_values.{i}.key; a hybrid's recurrent and MLP-only layers have none, a
        Falcon-H1 layer has both a key cache and states), otherwise the config's layers;
        plus the family's extra ones (a pooling head)."""
        cached = [v.name.split(".") for v in self.model.graph.inputs
                  if v.name.startswith("past_key_values.")]
        layers = (len({name[1] for name in cached if name[-1] == "key"}) if cached
                  else self.config.num_hidden_layers)
        return layers + family(self.family).extra_attention_blocks

    @functools.cached_property
    def histogram(self) -> Counter:
        return op_histogram(self.model)

    def nodes(self, op: str) -> list[ir.Node]:
        return [n for n in all_nodes(self.model.graph) if op_key(n) == op]


def _graph_of(model_bytes: bytes) -> tuple[ir.Model, set[tuple[str, str]]]:
    """A stored build's graph, as the L2 / L5 checks look at it: nodes, initializers, I/O,
    and the (domain, name) of its local functions. The intermediate values' shape
    annotations (value_info, a third of the parse) and the function bodies (another
    third; no check reads them) are left out; the bytes keep both: sessions, the L1 full
    checker and :meth:`Built.save` read the bytes."""
    proto = onnx.ModelProto.FromString(model_bytes)
    proto.graph.ClearField("value_info")
    functions = {(f.domain, f.name) for f in proto.functions}
    proto.ClearField("functions")
    return ir.serde.deserialize_model(proto), functions


class Builds:
    """(family, EP, dtype, quant) builds, once per test process.

    Under Bazel the ``ep_builds`` actions (testing/write_ep_builds.py) built them already,
    once for the EP's fusion, parity and golden targets: they are loaded from its output,
    and asking for a build it does not hold is an error (its key list must name it).
    Elsewhere they are built here.
    """

    def __init__(self, checkpoints: Checkpoints):
        self.checkpoints = checkpoints
        self._built: dict[tuple[str, str, str, str | None], Built] = {}

    def get(self, family_name: str, ep: str, dtype: str, quant: str | None = None) -> Built:
        key = (family_name, ep, dtype, quant)
        if key not in self._built:
            self._built[key] = self._prebuilt(*key) or build(
                self.checkpoints.folder(family_name), family_name, ep, dtype, quant)
        return self._built[key]

    @staticmethod
    def _prebuilt(family_name: str, ep: str, dtype: str, quant: str | None) -> Built | None:
        from testing import ep_builds

        archives = ep_builds.prebuilt_archives(ep)
        if archives is None:
            return None
        archive = ep_builds.find(archives, family_name, dtype, quant)
        if archive is None:
            raise KeyError(f"{family_name}/{ep}/{dtype}/{quant} is not among the {ep} ep_builds "
                           f"action's builds: add it to testing/write_ep_builds.suite_keys")
        return archive.read(family_name, dtype, quant)


def build(folder: str, family_name: str, ep: str, dtype: str, quant: str | None = None) -> Built:
    import mobius

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # every prompt position's logits: the suites compare them all (the
        # last-position default has its own tests: mobius/tasks/logits_to_keep_test.py)
        package = mobius.build(folder, execution_provider=ep, dtype=dtype, quant=quant,
                               prefill_logits="all")
    messages = [str(w.message) for w in caught if issubclass(w.category, UserWarning)]
    return Built(family_name, ep, dtype, package, messages, quant)


# --------------------------------------------------------------------------
# pytest glue shared by the ep/<name>/ test files


@dataclasses.dataclass(frozen=True)
class NoGqaOutsideCausalDecoder(Check):
    """No GroupQueryAttention in any model of the package but the causal-LM decoder."""

    def failure(self, built, generic):
        causal = has_causal_decoder(family(built.family).task)
        bad = {key: n for key, m in built.models.items()
               if not (causal and key == "model")
               and (n := sum(op_key(x) == GQA for x in all_nodes(m.graph)))}
        roles = built.roles
        return (f"GroupQueryAttention in {', '.join(f'{k} ({roles.get(k)})' for k in bad)}"
                if bad else None)

    def __str__(self):
        return "no-gqa-outside-decoder"


#: Every family: GQA only ever in the causal decoder (never in encoders, vision
#: towers, embedders, or seq2seq models).
ROLE_CHECKS: tuple[Check, ...] = (NoGqaOutsideCausalDecoder(),)

def token_mask_decoder_checks(ep: str) -> tuple[Check, ...]:
    """A decoder whose mask also reads its token ids (Gemma 3: image tokens attend to each
    other both ways): standard Attention per layer, since GroupQueryAttention is always
    causal (expanded to its ONNX body where the EP lacks the op: openvino), and no
    warning that GQA is missing."""
    if "Attention" in get_ep(ep).expand_standard_ops:
        return (Absent("Attention"), NoGqaWarning())
    return (PerLayer("Attention"), NoGqaWarning())


def has_token_mask_decoder(family_name: str) -> bool:
    """The family's decoder takes input_ids beside inputs_embeds for its mask
    (mobius/tasks/vision_language.py: ``decoder_token_ids``)."""
    return bool(getattr(family(family_name).module, "decoder_token_ids", False))


@dataclasses.dataclass(frozen=True)
class TraitGap:
    """Checks that cannot hold for a family with ``trait`` (family.ATTENTION_TRAITS) on an
    EP whose capabilities say ``cannot(caps)``: no fused form exists, not a missing rule."""

    trait: str
    checks: tuple[str, ...]
    reason: str
    cannot: Callable = lambda caps: True


#: what each attention trait keeps out of the fused attention, derived per EP (a family
#: declares its traits; no EP table names families for them)
TRAIT_GAPS = (
    # GroupQueryAttention's do_rotary would rotate the normed Q/K: RoPE stays a
    # RotaryEmbedding ahead of the norm
    TraitGap("qk_norm_after_rope", ("rope-in-gqa",),
             "QK norm after RoPE: RoPE cannot move into GroupQueryAttention"),
    # without head_sink the attention stays standard Attention
    TraitGap("attention_sinks", ("1xGroupQueryAttention/layer", "no-Attention", "rope-in-gqa",
                                 "gqa-do_rotary=0"),
             "attention sinks: the EP's GQA kernel takes no head_sink",
             lambda caps: not caps.gqa_head_sink),
    # GroupQueryAttention appends to its own cache: a layer reading another's stays
    # standard Attention, its Q rotated apart (unless the EP expands Attention: openvino)
    TraitGap("kv_sharing", ("1xAttention/layer", "no-Attention", "rope-in-gqa"),
             "KV-sharing layers have no cache: their attention stays standard Attention",
             lambda caps: "Attention" not in caps.expand_standard_ops),
)


def trait_gap(ep: str, family_name: str, check: str) -> str | None:
    """Why ``check`` cannot hold for the family on ``ep`` (TRAIT_GAPS), or None."""
    traits = family(family_name).attention_traits
    for gap in TRAIT_GAPS:
        if gap.trait in traits and check in gap.checks and gap.cannot(get_ep(ep)):
            return gap.reason
    return None


def fusion_params(ep: str, expectations: dict[str, tuple[Check, ...]],
                  known_gaps: dict[tuple[str, str, str], str] | None = None,
                  encoder_expectations: dict[str, tuple[Check, ...]] | None = None):
    """pytest params (family, dtype, check) for an EP's expectation tables.

    ``expectations`` apply to the causal-LM decoder of every family that has one,
    ``encoder_expectations`` to the encoder families' only model; every family
    gets ROLE_CHECKS. ``known_gaps`` maps (family, dtype, str(check)) to the
    reason a check cannot hold yet (a named missing rule), TRAIT_GAPS adds those
    the families' attention traits imply; those params are strict xfails, so
    they turn into failures the moment the rule lands.
    """
    known_gaps = dict(known_gaps or {})
    params = []
    for fam in ep_family_names(ep):
        task = family(fam).task
        table = (expectations if has_causal_decoder(task)
                 else (encoder_expectations or {}) if is_encoder(task) else {})
        if has_causal_decoder(task) and has_token_mask_decoder(fam):
            table = {dtype: token_mask_decoder_checks(ep) for dtype in EP_DTYPES[ep]}
        for dtype in family_dtypes(ep, fam):
            for check in table.get(dtype, ()) + ROLE_CHECKS:
                marks = [pytest.mark.shard_group(fam)]
                reason = (known_gaps.pop((fam, dtype, str(check)), None)
                          or trait_gap(ep, fam, str(check)))
                if reason is not None:
                    marks.append(pytest.mark.xfail(strict=True, reason=reason))
                params.append(pytest.param(fam, dtype, check, marks=marks,
                                           id=f"{fam}-{dtype}-{check}"))
    if known_gaps:
        raise ValueError(f"known_gaps name checks that are not in the table: {sorted(known_gaps)}")
    return params


def assert_check(builds: Builds, ep: str, family_name: str, dtype: str, check: Check) -> None:
    built = builds.get(family_name, ep, dtype)
    generic = builds.get(family_name, "default", dtype)
    failure = check.failure(built, generic)
    assert failure is None, f"{ep}/{dtype} {family_name}: {check}: {failure}"
