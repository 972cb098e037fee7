"""Tests of `bindings/`: models, services, admin, and one folder per package."""
