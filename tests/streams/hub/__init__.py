"""Tests of `streams.hub`."""
