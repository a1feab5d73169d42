"""Passes: layout (filled in by its issue)."""

PASSES: list = []
