"""Passes: fuse_transformer (filled in by its issue)."""

PASSES: list = []
