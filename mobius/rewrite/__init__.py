"""Rewrite rules, one per file; each is pattern + check + rewrite, tested in isolation."""
