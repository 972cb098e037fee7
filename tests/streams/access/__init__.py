"""Tests of `streams.access`."""
