"""End to end: live servers against the real services, driven over HTTP."""
