"""Tasks: the graph I/O contract around a model module."""
