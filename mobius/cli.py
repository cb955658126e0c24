"""The ``mobius`` command line: ``mobius build``, ``run``, ``verify``, ``list``."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys

from mobius.errors import MobiusError


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="mobius",
        description="Build ONNX Runtime / onnxruntime-genai packages from Hugging Face checkpoints.",
    )
    parser.add_argument("--debug", action="store_true", help="show tracebacks on errors")
    commands = parser.add_subparsers(dest="command", required=True)

    build = commands.add_parser(
        "build",
        help="build an ONNX package",
        description="Build an ONNX package from a hub id, a local checkpoint folder, "
        "or a built-in tiny model name (tiny-llama, tiny-qwen3, ...).",
    )
    build.add_argument("--model", "-m", required=True, help="hub id, local folder or tiny-* name")
    build.add_argument("output", nargs="?", help="output folder (or use --output)")
    build.add_argument("--output", "-o", dest="output_flag", help="output folder")
    build.add_argument("--ep", "--execution-provider", dest="ep", default="default",
                       choices=_ep_names(), help="target execution provider (default: default)")
    build.add_argument("--dtype", default="f32", help="f32 (default), f16 or bf16")
    _quant_arguments(build)
    build.add_argument("--layout", default="genai", choices=_layouts(),
                       help="package folder layout: genai (onnxruntime-genai, default), "
                       "transformers.js (onnx/ subfolder, config.json, for transformers.js) or "
                       "optimum (for optimum.onnxruntime's ORTModelFor* classes)")
    build.add_argument("--logits-to-keep", action=argparse.BooleanOptionalAction, default=None,
                       help="decoder input num_logits_to_keep: logits of the last k positions "
                       "only (default: on for the transformers.js layout, whose client feeds "
                       "it; off for genai, which cannot)")
    build.add_argument("--prefill-logits", choices=["last", "all"], default=None,
                       help="a causal LM's logits: last position only ([batch, 1, vocab], what "
                       "generation reads; onnxruntime-genai runs it as a pruned model) or every "
                       "position (default: last for the genai layout, all otherwise)")
    build.add_argument("--context-length", type=int, default=None, metavar="N",
                       help="longest sequence onnxruntime-genai may generate; it sizes the KV "
                       "cache (default: the model's max positions, at most 4096)")
    build.add_argument("--sliding-window-cache", action="store_true",
                       help="window-sized KV buffers for sliding-window layers in "
                       "onnxruntime-genai (cpu): bounded KV memory, but only for batch-1 "
                       "generation in genai with max_length >= the window")
    build.add_argument("--mtp", action="store_true",
                       help="also build the checkpoint's multi-token-prediction head as "
                       "mtp.onnx, the drafter of onnxruntime-genai's MtpGenerator (speculative "
                       "decoding; the decoder then returns every position's logits)")
    build.add_argument("--adapter", metavar="[NAME=]DIR", action="append",
                       help="PEFT LoRA adapter folder: merged into the weights, or with "
                       "--adapter-mode separate written as adapters/NAME.onnx_adapter "
                       "(repeat for several; NAME defaults to the folder's name)")
    build.add_argument("--adapter-mode", choices=["merged", "separate"], default="merged",
                       help="merged (default): one adapter folded into the weights; "
                       "separate: adapter files onnxruntime-genai's Adapters API switches "
                       "at run time")
    build.add_argument("--trace", action="store_true",
                       help="log what each optimization stage and rule did ([EP Trace] lines)")
    build.add_argument("--overwrite", action="store_true", help="replace a mobius package only")
    build.add_argument("--quiet", "-q", action="store_true", help="no progress bars or info lines")
    # SUPPRESS: without it the subcommand's default (False) would overwrite a
    # `mobius --debug build ...` given before the subcommand.
    build.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                       help="show tracebacks on errors")

    _trial_commands(commands)
    return parser


def _trial_commands(commands) -> None:
    """``run`` and ``verify`` (try a built package, check it against its checkpoint) and
    ``list``."""
    run = commands.add_parser(
        "run", help="run a package on a prompt",
        description="Run a package: a decoder streams greedy tokens through onnxruntime-genai "
        "(the package's chat template applied); an encoder prints its task's output.")
    run.add_argument("package", help="a folder `mobius build` wrote")
    run.add_argument("--prompt", "-p", required=True, help="the input text")
    run.add_argument("--no-chat-template", dest="chat_template", action="store_false",
                     help="feed the prompt as is, not as a user turn of the chat template")
    run.add_argument("--max-new-tokens", type=int, default=64, metavar="N",
                     help="most tokens a decoder generates (default 64; an EOS ends it sooner)")
    run.add_argument("--json", action="store_true", help="print the result as one JSON object")
    verify = commands.add_parser(
        "verify", help="compare a package with its checkpoint in transformers",
        description="Run the package and its checkpoint in transformers (pip install "
        "mobius[verify]) on a few fixed inputs; exit 1 when they differ beyond the "
        "package dtype's tolerance (docs/cli.md).")
    verify.add_argument("package", help="a folder `mobius build` wrote")
    verify.add_argument("--against", metavar="CHECKPOINT",
                        help="checkpoint folder (default: the one the package was built from)")
    for sub in (run, verify):
        sub.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                         help="show tracebacks on errors")
    listing = commands.add_parser(
        "list", help="list supported models, tasks, EPs, tiny checkpoints, or the "
                     "architectures of ORT GenAI's model builder (peer) and the family of each")
    listing.add_argument("what", choices=["models", "tasks", "eps", "tiny", "peer"])


def _quant_arguments(build: argparse.ArgumentParser) -> None:
    """--quant and its options; every one left out takes the EP's default (docs/eps.md)."""
    group = build.add_argument_group("weight quantization (defaults per EP: docs/eps.md)")
    group.add_argument("--quant", choices=["int4", "int8"],
                       help="quantize every Linear's weights (--dtype is then the activations')")
    group.add_argument("--quant-block-size", type=int, help="elements per scale: 16..256, power of 2")
    sym = group.add_mutually_exclusive_group()
    sym.add_argument("--quant-symmetric", dest="quant_symmetric", action="store_true",
                     default=None, help="no zero points")
    sym.add_argument("--quant-asymmetric", dest="quant_symmetric", action="store_false",
                     help="per-block zero points")
    group.add_argument("--quant-accuracy-level", type=int, choices=range(5),
                       help="MatMulNBits accuracy_level: 0 unset, 1 f32, 2 f16, 3 bf16, 4 int8")
    head = group.add_mutually_exclusive_group()
    head.add_argument("--quant-lm-head", dest="quant_lm_head", action="store_true", default=None,
                      help="quantize the lm_head too")
    head.add_argument("--no-quant-lm-head", dest="quant_lm_head", action="store_false",
                      help="keep the lm_head float")
    table = group.add_mutually_exclusive_group()
    table.add_argument("--quant-embedding", dest="quant_embedding", action="store_true",
                       default=None, help="quantize the embedding table at the build's bits "
                       "(default where the EP has GatherBlockQuantized: `mobius list eps`; a "
                       "table tied to the LM head shares the head's quantized copy)")
    table.add_argument("--no-quant-embedding", dest="quant_embedding", action="store_false",
                       help="keep the embedding table float, tied or not")
    group.add_argument("--quant-override", default="",
                       help="keep chosen weights at another kind, e.g. "
                            "'layers.0.*=float,lm_head=int8' (first match wins)")
    group.add_argument("--quant-method", choices=["minmax", "mse", "mixed"],
                       help="how each block's range is chosen: minmax (the exact span) or mse "
                            "(the candidate range with the least squared error); mixed "
                            "(default): mse, with the value projections and half the down "
                            "projections at int8 (docs/quantization.md; docs/benchmarks.md, "
                            "int4 quality on real weights)")
    group.add_argument("--quant-calibration", metavar="FILE.txt",
                       help="fit the quantized weights to the float model's activations on this "
                            "UTF-8 text (GPTQ; docs/quantization.md); opt-in, slower")
    group.add_argument("--quant-calibration-passes", type=int, metavar="N",
                       help="runs over the calibration text: 1 gathers statistics from the "
                            "float model, each further one from the model as the last "
                            "quantized it (default 2; docs/quantization.md)")


def _layouts() -> tuple[str, ...]:
    from mobius.package.transformers_js import LAYOUTS

    return LAYOUTS


def _ep_names() -> list[str]:
    from mobius.ep.registry import ep_registry

    return ep_registry.names()


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except KeyboardInterrupt as e:  # also during argument parsing and imports
        path = getattr(e, "path", None)
        if path:
            print(f"mobius: interrupted; the package was already complete in {path}",
                  file=sys.stderr)
        else:
            print("mobius: interrupted; nothing was written", file=sys.stderr)
        return 130


def _main(argv: list[str] | None) -> int:
    # `bazel run` executes in the runfiles tree; relative paths are the user's.
    workdir = os.environ.get("BUILD_WORKING_DIRECTORY")
    if workdir:
        os.chdir(workdir)
    args = _parser().parse_args(argv)
    quiet = getattr(args, "quiet", False) and not getattr(args, "trace", False)
    logging.basicConfig(level=logging.WARNING if quiet else logging.INFO, format="%(message)s")
    logging.getLogger("onnxscript").setLevel(logging.WARNING)
    logging.getLogger("onnx_ir").setLevel(logging.WARNING)
    try:
        return _run(args)
    except (MobiusError, ValueError, OSError) as e:
        if args.debug:
            raise
        print(f"mobius: error: {_one_line(e)}", file=sys.stderr)
        return 1


def _one_line(e: Exception) -> str:
    """The error's message; an existing output's names the CLI flag, not the Python argument."""
    from mobius.package.output_swap import OutputExistsError

    if isinstance(e, OutputExistsError):
        return f"output folder {e.path} {e.when}; pass --overwrite to replace it"
    if isinstance(e, OSError) and e.filename and e.strerror:
        return f"{e.strerror}: {e.filename}"
    return str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__


def _run(args: argparse.Namespace) -> int:
    if args.command == "list":
        return _list(args.what)
    if args.command == "run":
        from mobius.trial.run import run

        return run(args.package, args.prompt, use_template=args.chat_template,
                   max_new_tokens=args.max_new_tokens, as_json=args.json)
    if args.command == "verify":
        from mobius.trial.verify import verify

        return verify(args.package, args.against)
    output = args.output_flag or args.output
    if not output:
        raise MobiusError("no output folder given (positional OUTPUT or --output)")
    from mobius.builder import build_request
    from mobius.package.model_package import ModelPackage
    from mobius.request import BuildRequest
    from mobius.source import resolve_checkpoint

    local = args.model if os.path.isdir(args.model) else None  # a hub id: checked below
    ModelPackage.check_output(output, overwrite=args.overwrite, source=local)  # before a build
    request = BuildRequest.from_options(
        args.model, execution_provider=args.ep, dtype=args.dtype,
        trace_optimization=args.trace, progress=not args.quiet,
        quant=args.quant, quant_block_size=args.quant_block_size,
        quant_symmetric=args.quant_symmetric, quant_accuracy_level=args.quant_accuracy_level,
        quant_lm_head=args.quant_lm_head, quant_embedding=args.quant_embedding,
        quant_override=args.quant_override, quant_method=args.quant_method,
        quant_calibration=args.quant_calibration,
        quant_calibration_passes=args.quant_calibration_passes, layout=args.layout,
        logits_to_keep=args.logits_to_keep, prefill_logits=args.prefill_logits,
        context_length=args.context_length, adapter=args.adapter,
        adapter_mode=args.adapter_mode, sliding_window_cache=args.sliding_window_cache,
        mtp=args.mtp)
    request.target()  # every option checked before any download
    folder = resolve_checkpoint(args.model)
    ModelPackage.check_output(output, overwrite=args.overwrite, source=folder)
    package = build_request(dataclasses.replace(request, model=folder))
    path = package.save(output, overwrite=args.overwrite, progress=not args.quiet)
    if not args.quiet:
        from mobius.trial.run import try_line

        print(f"wrote {path}\n{try_line(path)}".rstrip())
    return 0


def _list(what: str) -> int:
    if what == "eps":
        from mobius.ep.registry import ep_registry

        for caps in ep_registry:
            print(f"{caps.name}: {caps.description}")
            for key, value in caps.summary().items():
                if key not in ("name", "description"):
                    print(f"    {key}: {value}")
        return 0
    if what == "tiny":
        from mobius.tiny.presets import TINY_PRESETS

        for name, raw in sorted(TINY_PRESETS.items()):  # LFM2-Audio's config has no model_type
            print(f"{name}\t{raw.get('model_type') or raw['architectures'][0]}")
        return 0
    from mobius.models.catalog import models_table, peer_table, tasks_table

    rows = {"tasks": tasks_table, "peer": peer_table}.get(what, models_table)()
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
