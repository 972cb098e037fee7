"""Tests of `bindings.api`."""
