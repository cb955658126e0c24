"""Built-in tiny random checkpoints: a whole build with no download.

Kept import-free so that each module is its own Bazel target with acyclic deps.
"""
