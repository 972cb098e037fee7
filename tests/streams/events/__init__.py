"""Tests of `streams.events`."""
