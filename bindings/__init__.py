"""The control plane: configuration models, validation, admin, API, and read/write functions."""
