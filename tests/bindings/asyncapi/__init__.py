"""Tests of `bindings.asyncapi`."""
