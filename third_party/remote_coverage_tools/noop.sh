#!/bin/sh
# No-op stand-in for Bazel coverage tools (offline shim).
exit 0
