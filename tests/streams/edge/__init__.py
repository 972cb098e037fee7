"""Tests of `streams.edge`."""
