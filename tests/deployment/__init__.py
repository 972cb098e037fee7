"""Tests of how the platform runs: the web supervisor, the settings, the Docker image."""
