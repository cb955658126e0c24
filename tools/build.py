"""`bazel run //tools:build -- --model=ID_OR_DIR --ep=cuda --output=OUT`: the mobius CLI's build command."""

import sys

from mobius.cli import main

if __name__ == "__main__":
    sys.exit(main(["build", *sys.argv[1:]]))
