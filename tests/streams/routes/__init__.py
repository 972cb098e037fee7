"""Tests of `streams.routes`."""
