"""Tests of `bindings.documents`."""
