"""Tests of `streams.server`."""
