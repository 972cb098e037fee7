"""Hostile input from hypothesis, against the real code paths."""
