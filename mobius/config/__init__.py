"""Model configuration: what a checkpoint's config.json says, normalized.

Kept import-free so that each module is its own Bazel target with acyclic deps.
"""
