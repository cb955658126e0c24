"""Execution providers, described as data (EpCapabilities) in one registry.

Kept import-free so that each module is its own Bazel target with acyclic deps.
"""
