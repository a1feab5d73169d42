"""Passes: precision (filled in by its issue)."""

PASSES: list = []
