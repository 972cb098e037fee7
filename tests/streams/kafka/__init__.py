"""Tests of `streams.kafka`."""
