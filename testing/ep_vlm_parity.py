"""L3 EP parity of the vision-language packages (task image-text-to-text).

An EP's package against the generic ("default") package of the same dtype, on
onnxruntime's CPU EP, model by model. The generic package runs the chain
genai runs -- vision (one small image) -> embedding -> decoder prefill, then
greedy decode steps whose token goes through the embedding model with no image
features -- and each model of the EP package gets exactly the generic run's
inputs (its image features, inputs_embeds and chosen tokens): each EP model is
held to the per-dtype tolerances of testing/ep_parity.py on identical inputs,
so an error is pinned to the model that makes it rather than compounded down
the chain. Compared: image features, prefill inputs_embeds, logits per step.

The image inputs come from the families' checkpoint helpers (testing/*_checkpoints.py);
prompts are batch 1: text, one image's tokens, text. Phi-4-multimodal also runs
its speech model on one 16-frame clip (2 audio tokens, after the image's), Gemma 4
on 16 log-mel frames (4 audio tokens), Gemma 4 Unified on 16 raw-sample frames (16 audio
tokens): audio_features are compared too.
"""

from __future__ import annotations

import dataclasses
import types

import ml_dtypes
import numpy as np

from testing import ep_parity, ep_suite, parity

_NP = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(int32)": np.int32,
       "tensor(int64)": np.int64, "tensor(bfloat16)": ml_dtypes.bfloat16}
STEPS = 2


def vlm_matrix(ep: str, dtypes) -> list[tuple[str, str]]:
    """(family, dtype) pairs: the vision-language families the EP serves
    (EpCapabilities.tasks), in ``dtypes`` (those whose EP graphs the CPU EP runs:
    ep_parity.NOT_CPU_RUNNABLE's reason holds for a VLM package's decoder too)."""
    families = [f for f in ep_suite.ep_family_names(ep)
                if ep_suite.family(f).task.name == "image-text-to-text"]
    return [(f, d) for f in families for d in dtypes if d in ep_suite.family_dtypes(ep, f)]


def _namespace(raw):
    """A config dict as attributes (what the checkpoint helpers read of transformers' config)."""
    if isinstance(raw, dict):
        return types.SimpleNamespace(**{k: _namespace(v) for k, v in raw.items()})
    return raw


def vision_feeds(family: str, raw: dict, rng) -> dict[str, np.ndarray]:
    """One small image in the family's vision-model layout (float32; cast per session)."""
    config = _namespace(raw)
    if family in ("qwen2_5_vl", "qwen3_vl", "qwen3_5", "qwen3_5_moe", "exaone4_5", "lfm3_vl"):
        from testing.qwen2_5_vl_checkpoints import make_pixels

        pixels, grid = make_pixels(config, [(1, 4, 4)], rng)
        return {"pixel_values": pixels, "image_grid_thw": grid}
    if family == "mistral3":
        from testing.mistral3_checkpoints import make_images

        _, pixels, _ = make_images(config, [(16, 24)], rng)  # 2 x 3 merged patches
        return {"pixel_values": pixels}
    if family == "lfm2_vl":
        from testing.lfm2_vl_checkpoints import make_patches

        return make_patches(config, [(4, 6)], rng)
    if family == "phi4_multimodal":
        from testing.phi4mm_checkpoints import hd_inputs

        pixels, sizes, mask, _ = hd_inputs([(1, 1, 0, 0)], rng)  # global crop + 1 sub-crop
        return {"pixel_values": pixels, "image_sizes": sizes, "image_attention_mask": mask}
    if family == "gemma4":  # a 6 x 4 patch image: 3 x 2 pooled tokens
        vision = raw["vision_config"]
        x, y = np.meshgrid(np.arange(6), np.arange(4))
        positions = np.stack([x.ravel(), y.ravel()], -1)[None].astype(np.int64)
        pixels = rng.random((1, 24, 3 * vision["patch_size"] ** 2)).astype(np.float32)
        return {"pixel_values": pixels, "pixel_position_ids": positions}
    if family == "gemma4_unified":  # a 3 x 2 merged-patch image: 6 tokens
        vision = raw["vision_config"]
        x, y = np.meshgrid(np.arange(3), np.arange(2))
        positions = np.stack([x.ravel(), y.ravel()], -1)[None].astype(np.int64)
        width = 3 * (vision["patch_size"] * vision["pooling_kernel_size"]) ** 2
        pixels = rng.random((1, 6, width)).astype(np.float32)
        return {"pixel_values": pixels, "pixel_position_ids": positions}
    if family == "phi3_v":
        from testing.phi3v_checkpoints import hd_inputs

        pixels, sizes, _ = hd_inputs([(1, 1)], 1, rng)  # global crop + 1 sub-crop
        return {"pixel_values": pixels, "image_sizes": sizes}
    size = raw["vision_config"]["image_size"]  # llava, gemma3: one fixed-size image
    return {"pixel_values": rng.standard_normal((1, 3, size, size)).astype(np.float32)}


def image_token_id(raw: dict) -> int:
    if raw.get("model_type") == "phi3_v":  # genai's phi3v placeholder: image 1's tokens are -1
        return -1
    for key in ("image_token_index", "image_token_id"):
        if key in raw:
            return int(raw[key])
    return int(raw["vision_config"]["image_token_id"])  # phi4_multimodal


def _cast(session, feeds: dict) -> dict:
    """Feeds in the session's declared input types (f16 graphs take f16 pixels / embeds)."""
    types_ = {i.name: i.type for i in session.get_inputs()}
    return {k: v.astype(_NP.get(types_[k], v.dtype)) for k, v in feeds.items() if k in types_}


def _run(session, feeds: dict) -> dict[str, np.ndarray]:
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, parity.run_session(session, _cast(session, feeds))))  # bf16 too


class Chain:
    """The three sessions of one package (vision, embedding, decoder)."""

    def __init__(self, built):
        self.config = built.config
        self.vision = ep_parity.session(built.onnx_bytes("vision"))
        self.embedding = ep_parity.session(built.onnx_bytes("embedding"))
        self.speech = ep_parity.session(built.onnx_bytes("speech")) if "speech" in built.models \
            else None
        self.decoder = ep_parity.session(built.onnx_bytes("model"))
        self.np_dtype = ep_parity.np_dtype(built.dtype)

    def features(self, feeds):
        return _run(self.vision, feeds)["image_features"]

    def audio(self, feeds):
        return _run(self.speech, feeds)["audio_features"] if self.speech else None

    def embed(self, input_ids, features, audio=None):
        feeds = {"input_ids": input_ids, "image_features": features}
        if self.speech:
            feeds["audio_features"] = (audio if audio is not None
                                       else np.zeros((0, features.shape[-1]), features.dtype))
        return _run(self.embedding, feeds)["inputs_embeds"]

    def decode(self, embeds, input_ids, mask, past):
        """(logits, present.* renamed to past_key_values.*) of one decoder call."""
        rank = {i.name: len(i.shape) for i in self.decoder.get_inputs()}
        positions = parity.position_ids_for(mask, embeds.shape[1])
        if rank["position_ids"] == 3:  # Qwen's M-RoPE: the three streams agree on text
            positions = np.broadcast_to(positions, (3, *positions.shape)).copy()
        feeds = {"inputs_embeds": embeds, "input_ids": input_ids, "attention_mask": mask,
                 "position_ids": positions,
                 **(past if past is not None
                    else parity.initial_past(self.decoder, self.config, 1, self.np_dtype))}
        out = _run(self.decoder, feeds)
        return out["logits"], parity.carried_past(out)


@dataclasses.dataclass
class Trace:
    """What one chain computed: features, prefill embeds, per-step embeds and logits."""

    features: np.ndarray
    audio: np.ndarray | None
    embeds: list[np.ndarray]
    logits: list[np.ndarray]
    tokens: list[np.ndarray]


def audio_feeds(family: str, raw: dict, rng) -> dict | None:
    """One 16-frame clip for a package with a speech model (Phi-4-multimodal; Gemma 4:
    log-mel frames, 4 audio tokens; Gemma 4 Unified: raw-sample frames, a token each)."""
    if "audio_config" not in raw:
        return None
    if family == "gemma4_unified":
        from mobius.models.gemma4_unified_audio import unified_audio_options

        frame = unified_audio_options(raw["audio_config"]).audio_embed_dim
        return {"audio_embeds": rng.standard_normal((1, 16, frame)).astype(np.float32),
                "audio_attention_mask": np.ones((1, 16), bool),
                "audio_sizes": np.array([16], np.int64)}
    if family == "gemma4":
        mel = raw["audio_config"]["subsampling_conv_channels"][0] // 4 * 4
        return {"audio_embeds": rng.standard_normal((1, 16, mel)).astype(np.float32),
                "audio_attention_mask": np.ones((1, 16), bool),
                "audio_sizes": np.array([4], np.int64)}
    from testing.phi4mm_checkpoints import audio_inputs

    return audio_inputs([16], rng)[0]


def prompt(raw: dict, tokens: int, audio_tokens: int, rng) -> np.ndarray:
    """[1, 4 + tokens + audio_tokens + 3]: random text, the image's (and clip's) tokens,
    random text."""
    text = rng.integers(3, 1000, size=7)  # below every special token of the presets
    audio_id = (raw.get("audio_config") or {}).get("audio_token_id",
                                                  raw.get("audio_token_id", 0))
    ids = np.concatenate([text[:4], np.full(tokens, image_token_id(raw)),
                          np.full(audio_tokens, audio_id), text[4:]])
    return ids[None].astype(np.int64)


def run_reference(chain: Chain, vision: dict, audio: dict | None, raw: dict, rng,
                  steps: int = STEPS) -> tuple:
    """The generic chain: (trace, input_ids)."""
    features = chain.features(vision)
    clip = chain.audio(audio) if audio else None
    input_ids = prompt(raw, features.shape[0], 0 if clip is None else clip.shape[0], rng)
    trace = Trace(features, clip, [], [], [])
    ids, feats, mask, past = input_ids, features, np.ones_like(input_ids), None
    for step in range(steps + 1):
        trace.embeds.append(chain.embed(ids, feats, clip if step == 0 else None))
        logits, past = chain.decode(trace.embeds[-1], ids, mask, past)
        trace.logits.append(logits)
        if step == steps:
            break
        ids = logits[:, -1].argmax(-1)[:, None].astype(np.int64)
        trace.tokens.append(ids)
        feats = np.zeros((0, features.shape[-1]), features.dtype)
        mask = np.concatenate([mask, np.ones((1, 1), np.int64)], axis=1)
    return trace, input_ids


def run_candidate(chain: Chain, vision: dict, audio: dict | None, reference: Trace,
                  input_ids) -> Trace:
    """Each EP model on the generic run's inputs (features, embeds, tokens)."""
    trace = Trace(chain.features(vision), chain.audio(audio) if audio else None, [], [],
                  reference.tokens)
    trace.embeds.append(chain.embed(input_ids, reference.features, reference.audio))
    ids, mask, past = input_ids, np.ones_like(input_ids), None
    for step, embeds in enumerate(reference.embeds):
        logits, past = chain.decode(embeds, ids, mask, past)
        trace.logits.append(logits)
        if step < len(reference.tokens):
            ids = reference.tokens[step]
            mask = np.concatenate([mask, np.ones((1, 1), np.int64)], axis=1)
    return trace


def tolerance(reference: np.ndarray, dtype: str, spacings: int = ep_parity.HALF_ULPS) -> float:
    """testing/ep_parity.py's per-dtype tolerance for a tensor of this magnitude
    (``spacings``: a family's low-precision allowance, ep_parity.tolerances)."""
    if dtype == "f32":
        return ep_parity.F32_ATOL
    return spacings * ep_parity.spacing(float(np.abs(reference).max()), dtype)


def generic_trace(generic_built, family: str, seed: int = 0) -> tuple:
    """The generic package's side of :func:`assert_vlm_close`: (vision feeds, audio feeds,
    reference trace, input_ids), the same in every EP's comparison."""
    raw = generic_built.config.raw
    rng = np.random.default_rng(seed)
    vision, audio = vision_feeds(family, raw, rng), audio_feeds(family, raw, rng)
    reference, input_ids = run_reference(Chain(generic_built), vision, audio, raw, rng)
    return vision, audio, reference, input_ids


def assert_vlm_close(ep_built, generic_built, family: str, what: str, seed: int = 0,
                     generic: tuple | None = None,
                     spacings: int = ep_parity.HALF_ULPS) -> None:
    """The EP package's image features, prefill inputs_embeds and every step's logits
    match the generic package's (see the module docstring). ``generic``: the
    :func:`generic_trace` of ``generic_built`` already made (testing/generic_runs.py);
    ``spacings``: the family's low-precision allowance (ep/parity_suite._spacings)."""
    dtype = generic_built.dtype
    vision, audio, reference, input_ids = generic or generic_trace(generic_built, family, seed)
    keys = list(ep_built.serialized or ep_built.models)
    if keys == list(generic_built.serialized or generic_built.models) and all(
            ep_parity.same_graph(ep_built.onnx_bytes(k), generic_built.onnx_bytes(k))
            for k in keys):
        candidate = reference  # the same package: its chain would repeat the generic run
    else:
        candidate = run_candidate(Chain(ep_built), vision, audio, reference, input_ids)
    pairs = [("image_features", reference.features, candidate.features),
             ("inputs_embeds", reference.embeds[0], candidate.embeds[0])]
    if audio:
        pairs.append(("audio_features", reference.audio, candidate.audio))
    pairs += [(f"logits step {i}", a, b) for i, (a, b) in
              enumerate(zip(reference.logits, candidate.logits))]
    for name, a, b in pairs:
        a, b = a.astype(np.float32), b.astype(np.float32)
        assert a.shape == b.shape, f"{what}: {name} shape {b.shape} != {a.shape}"
        diff, tol = float(np.abs(a - b).max()), tolerance(a, dtype, spacings)
        assert diff <= tol, (f"{what}: {name} max|diff| {diff:.3g} > {tol:.3g} "
                             f"(max|ref| {float(np.abs(a).max()):.3g})")
