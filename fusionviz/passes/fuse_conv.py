"""Passes: fuse_conv (filled in by its issue)."""

PASSES: list = []
