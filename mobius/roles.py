"""Model roles: the part a graph plays in its package.

A task (mobius/tasks) assigns one to each model it builds; the optimizer and
its rules (mobius/optimize, mobius/rewrite) decide legality from it, e.g.
GroupQueryAttention fuses in decoders only. Both read this module; neither
imports the other for it.
"""

DECODER, ENCODER, VISION, EMBEDDING = "decoder", "encoder", "vision", "embedding"
ROLES = (DECODER, ENCODER, VISION, EMBEDDING)
