"""Tests of `streams/`, one folder per package."""
