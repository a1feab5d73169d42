"""Passes: fuse_norm_act (filled in by its issue)."""

PASSES: list = []
