"""Passes: fuse_matmul (filled in by its issue)."""

PASSES: list = []
