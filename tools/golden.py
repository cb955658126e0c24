"""Regenerates or checks the L5 golden op-histogram snapshots (ep/<name>/golden/<family>.json).

    ./bazelw run //tools:golden -- --update              # rewrite every snapshot
    ./bazelw run //tools:golden -- --update --ep cpu     # one EP (repeatable)
    ./bazelw run //tools:golden -- --family llama        # check only; exit 1 on a diff
    ./bazelw run //tools:golden -- --update --quant int4 # ep/<name>/golden_int4 (quantized)
    python3 tools/golden.py --update                     # the same, outside Bazel

Each snapshot is built from a tiny transformers checkpoint of the family (see
testing/golden.py); with --update, snapshots of families that no longer exist
are deleted. Under ``bazel run`` the files are written into the workspace
(BUILD_WORKSPACE_DIRECTORY), not into the runfiles tree.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import tempfile

_HERE = os.path.dirname(os.path.abspath(__file__))
_RUNFILES_ROOT = os.path.dirname(_HERE)
if _RUNFILES_ROOT not in sys.path:
    sys.path.insert(0, _RUNFILES_ROOT)

from testing import ep_suite, golden  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="golden", description=__doc__.splitlines()[0])
    parser.add_argument("--update", action="store_true", help="write the snapshots")
    parser.add_argument("--ep", action="append", choices=sorted(ep_suite.EP_DTYPES),
                        help="EP(s) to process (default: all built-in EPs)")
    parser.add_argument("--family", action="append", choices=ep_suite.family_names(),
                        help="family/families to process (default: all)")
    parser.add_argument("--quant", choices=["int4"],
                        help="the quantized snapshots (ep/<name>/golden_<quant>)")
    parser.add_argument("--root", default=os.environ.get("BUILD_WORKSPACE_DIRECTORY", golden.ROOT),
                        help="repository root to read/write ep/<name>/golden in")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")

    eps = args.ep or list(ep_suite.EP_DTYPES)
    mismatches = 0
    with tempfile.TemporaryDirectory(prefix="mobius-golden-") as tmp:
        builds = ep_suite.Builds(ep_suite.Checkpoints(tmp))
        for ep in eps:
            dtype = ep_suite.primary_dtype(ep)
            served = ep_suite.ep_family_names(ep)  # EpCapabilities.tasks (mlx: LLMs only)
            families = [f for f in args.family if f in served] if args.family else served
            if args.quant and not ep_suite.takes_golden_quant(ep):
                families = []  # refused by the EP (ep/golden_suite.py checks the refusal)
            for family in families:
                snap = golden.snapshot(builds.get(family, ep, dtype, args.quant))
                path = golden.golden_path(ep, family, args.root, args.quant)
                lines = golden.diff(golden.load(path), snap)
                rel = os.path.relpath(path, args.root)
                if not lines:
                    print(f"ok       {rel}")
                elif args.update:
                    golden.write(snap, args.root)
                    print(f"updated  {rel}" + "".join(f"\n           {line}" for line in lines))
                else:
                    mismatches += 1
                    print(golden.failure_message(ep, family, lines, args.root, args.quant))
            if not args.family:
                for name in golden.stale_files(ep, families, args.root, args.quant):
                    path = os.path.join(golden.golden_dir(ep, args.root, args.quant), name)
                    if args.update:
                        os.remove(path)
                        print(f"removed  {os.path.relpath(path, args.root)} (no such family)")
                    else:
                        mismatches += 1
                        print(f"stale    {os.path.relpath(path, args.root)} (no such family)")
    if mismatches:
        print(f"{mismatches} snapshot(s) differ; rerun with --update to accept.", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
