"""Passes: denormal (filled in by its issue)."""

PASSES: list = []
