"""Tests of `streams.telemetry`."""
