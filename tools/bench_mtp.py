"""``bench mtp``: onnxruntime-genai greedy decoding with and without the MTP drafter.

One package built with ``mobius build --mtp`` (f16: genai 0.18's MtpGenerator refuses f32)
from a Qwen 3.5 checkpoint with a random MTP head, or a tiny DeepSeek-V3 / GLM-4.5 /
GLM-4.7-Flash one with a random MTP layer (testing/mtp_checkpoint.py): plain
og.Generator vs og.MtpGenerator on the same prompt, tokens/s (median of --repeat) and the
head's acceptance rate. The two token streams must be equal (the run fails otherwise).
"""

from __future__ import annotations

import os
import statistics
import sys
import time

#: checkpoint shapes: name -> (tiny preset overrides); "tiny" is the test preset itself
SHAPES = {
    "tiny": {},
    # 8 layers (every 4th attention) of width 512: big enough that a forward costs more
    # than genai's per-step overhead
    "small": {"hidden_size": 512, "intermediate_size": 1376, "num_hidden_layers": 8,
              "num_attention_heads": 8, "num_key_value_heads": 2, "head_dim": 64,
              "layer_types": None, "full_attention_interval": 4, "linear_num_key_heads": 4,
              "linear_num_value_heads": 8, "linear_key_head_dim": 64,
              "linear_value_head_dim": 64},
}
#: DeepSeek-V3-layout shapes: name -> tiny preset (its MTP layer added, no embed copy)
NEXTN_SHAPES = {"deepseek_v3": "tiny-deepseek-v3", "glm4_moe": "tiny-glm4_moe",
                "glm4_moe_lite": "tiny-glm4_moe_lite"}


def add_parser(sub, workdir: str) -> None:
    parser = sub.add_parser("mtp", help="genai tokens/s with and without the MTP drafter")
    parser.add_argument("--workdir", default=os.path.join(workdir, "mtp"))
    parser.add_argument("--shape", default="tiny", choices=sorted([*SHAPES, *NEXTN_SHAPES]))
    parser.add_argument("--tokens", type=int, default=128, help="new tokens per run")
    parser.add_argument("--repeat", type=int, default=3, help="runs; the median is reported")
    parser.add_argument("--agree", action="store_true",
                        help="zero the decoder's and the head's final norms (Qwen: weight -1 "
                        "under (1 + w)): both emit token 0, so every draft is accepted (the "
                        "runtime's best case on this shape, not a model's)")
    parser.add_argument("--json", metavar="FILE", help="also write the results as JSON")


def command(args, write_json) -> int:
    package = _package(args.workdir, args.shape, args.agree)
    shape = args.shape + (" (agreeing)" if args.agree else "")
    result = {"shape": shape, "new_tokens": args.tokens, **measure(package, args.tokens,
                                                                 args.repeat)}
    print(markdown(result))
    write_json(args.json, result)
    return 0


def _package(workdir: str, shape: str, agree: bool) -> str:
    import mobius

    folder = os.path.join(workdir, shape + ("-agree" if agree else ""))
    checkpoint, package = os.path.join(folder, "ckpt"), os.path.join(folder, "pkg")
    if not os.path.isdir(package):
        norms = _checkpoint(checkpoint, shape)
        if agree:
            _zero_norms(checkpoint, norms)
        mobius.build(checkpoint, dtype="f16", mtp=True).save(package)
    return package


def _checkpoint(checkpoint: str, shape: str) -> dict[str, float]:
    """Writes the shape's checkpoint with its head; returns the decoder's and the head's
    final norm weights and the value that zeroes each."""
    from testing.hf_checkpoints import make_hf_checkpoint
    from testing.mtp_checkpoint import add_mtp_head, add_nextn_layer

    if shape in NEXTN_SHAPES:
        make_hf_checkpoint(checkpoint, NEXTN_SHAPES[shape])
        layer = add_nextn_layer(checkpoint, embed_copy=False)
        return {"model.norm.weight": 0.0, layer + "shared_head.norm.weight": 0.0}
    overrides = SHAPES[shape]
    make_hf_checkpoint(checkpoint, "tiny-qwen3_5", **overrides)
    layers = overrides.get("num_hidden_layers", 4)
    add_mtp_head(checkpoint, f"model.layers.{layers - 1 if overrides else 2}.")
    return {"model.norm.weight": -1.0, "mtp.norm.weight": -1.0}


def _zero_norms(checkpoint: str, norms: dict[str, float]) -> None:
    import numpy as np
    from safetensors.numpy import load_file, save_file

    path = os.path.join(checkpoint, "model.safetensors")
    tensors = load_file(path)
    for name, value in norms.items():
        tensors[name] = np.full_like(tensors[name], value)
    save_file(tensors, path, metadata={"format": "pt"})


def measure(package: str, new_tokens: int, repeat: int) -> dict:
    """Median tokens/s of plain and MTP greedy decoding, the MTP run's stats."""
    import numpy as np
    import onnxruntime_genai as og

    model, head = og.Model(package), og.Model(os.path.join(package, "mtp"))
    prompt = np.arange(3, 35, dtype=np.int32)

    def run(make):
        params = og.GeneratorParams(model)
        params.set_search_options(max_length=len(prompt) + new_tokens, do_sample=False)
        generator = make(params)
        generator.append_tokens(prompt)
        start = time.perf_counter()
        while not generator.is_done():
            generator.generate_next_token()
        return generator, new_tokens / (time.perf_counter() - start)

    plain = [run(lambda p: og.Generator(model, p)) for _ in range(repeat)]
    mtp = [run(lambda p: og.MtpGenerator(model, head, p)) for _ in range(repeat)]
    tokens = np.asarray(plain[0][0].get_sequence(0))
    if not np.array_equal(np.asarray(mtp[0][0].get_sequence()), tokens):
        raise SystemExit("bench mtp: speculative tokens differ from plain greedy")
    stats = mtp[0][0].get_stats()
    return {"plain_tokens_per_s": statistics.median(r for _, r in plain),
            "mtp_tokens_per_s": statistics.median(r for _, r in mtp),
            "drafts_evaluated": stats["draft_tokens_evaluated"],
            "drafts_accepted": stats["draft_tokens_accepted"],
            "target_forwards": stats["target_forward_passes"],
            "draft_forwards": stats["draft_forward_passes"]}


def markdown(r: dict) -> str:
    rate = r["drafts_accepted"] / max(r["drafts_evaluated"], 1)
    return ("| shape | new tokens | plain tok/s | MTP tok/s | acceptance | target forwards |\n"
            "|---|---|---|---|---|---|\n"
            f"| {r['shape']} | {r['new_tokens']} | {r['plain_tokens_per_s']:.0f} | "
            f"{r['mtp_tokens_per_s']:.0f} | {rate:.0%} ({r['drafts_accepted']}/"
            f"{r['drafts_evaluated']}) | {r['target_forwards']} |")


if __name__ == "__main__":
    sys.exit("run as: ./bazelw run //tools:bench -- mtp")
