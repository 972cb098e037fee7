"""Tests of what the docs, the README and the docstrings say about the code."""
