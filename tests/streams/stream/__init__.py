"""Tests of `streams.stream`."""
