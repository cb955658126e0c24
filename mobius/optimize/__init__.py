"""The EP-aware optimization pipeline: cleanup -> fuse -> inline -> lower -> fold.

Kept import-free so that each module is its own Bazel target with acyclic deps.
"""
