"""Tests of `analytics/`."""
