"""The model and its norms: LayerNorm, RMSNorm, DyT and their kernels, the decoder, conversion.

Depends only on :mod:`ablate.core` (each component builds itself from its config section).
"""
