"""Tests of `streams.codecs`."""
