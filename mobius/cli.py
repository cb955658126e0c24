"""The ``mobius`` command line: ``mobius build``, ``mobius list``."""

from __future__ import annotations

import argparse
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
    build.add_argument("--layout", default="genai", choices=_layouts(),
                       help="package folder layout: genai (onnxruntime-genai, default) or "
                       "transformers.js (onnx/ subfolder, config.json, for transformers.js)")
    build.add_argument("--logits-to-keep", action=argparse.BooleanOptionalAction, default=None,
                       help="decoder input num_logits_to_keep: logits of the last k positions "
                       "only (default: on for the transformers.js layout, whose client feeds "
                       "it; off for genai, which cannot)")
    build.add_argument("--context-length", type=int, default=None, metavar="N",
                       help="longest sequence onnxruntime-genai may generate; it sizes the KV "
                       "cache (default: the model's max positions, at most 4096)")
    build.add_argument("--adapter", metavar="DIR",
                       help="PEFT LoRA adapter folder to merge into the weights")
    build.add_argument("--trace", action="store_true",
                       help="log what each optimization stage and rule did ([EP Trace] lines)")
    build.add_argument("--overwrite", action="store_true", help="replace a non-empty output folder")
    build.add_argument("--quiet", "-q", action="store_true", help="no progress bars or info lines")
    # SUPPRESS: without it the subcommand's default (False) would overwrite a
    # `mobius --debug build ...` given before the subcommand.
    build.add_argument("--debug", action="store_true", default=argparse.SUPPRESS,
                       help="show tracebacks on errors")

    listing = commands.add_parser("list", help="list supported models, EPs or tiny checkpoints")
    listing.add_argument("what", choices=["models", "eps", "tiny"])
    return parser


def _layouts() -> tuple[str, ...]:
    from mobius.package.transformers_js import LAYOUTS

    return LAYOUTS


def _ep_names() -> list[str]:
    from mobius.ep.registry import ep_registry

    return ep_registry.names()


def main(argv: list[str] | None = None) -> int:
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
        print(f"mobius: error: {e}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("mobius: interrupted; nothing was written", file=sys.stderr)
        return 130


def _run(args: argparse.Namespace) -> int:
    if args.command == "list":
        return _list(args.what)
    output = args.output_flag or args.output
    if not output:
        raise MobiusError("no output folder given (positional OUTPUT or --output)")
    from mobius.builder import build
    from mobius.package.model_package import ModelPackage

    ModelPackage.check_output(output, overwrite=args.overwrite)  # fail before a long build
    package = build(args.model, execution_provider=args.ep, dtype=args.dtype,
                    trace_optimization=args.trace, progress=not args.quiet,
                    layout=args.layout, logits_to_keep=args.logits_to_keep,
                    context_length=args.context_length, adapter=args.adapter)
    path = package.save(output, overwrite=args.overwrite, progress=not args.quiet)
    if not args.quiet:
        print(f"wrote {path}")
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

        for name, raw in sorted(TINY_PRESETS.items()):
            print(f"{name}\t{raw['model_type']}")
        return 0
    from mobius.models.catalog import models_table

    rows = models_table()
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    return 0


if __name__ == "__main__":
    sys.exit(main())
