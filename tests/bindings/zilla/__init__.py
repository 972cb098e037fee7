"""Tests of `bindings.zilla`."""
