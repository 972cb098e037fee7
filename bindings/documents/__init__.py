"""The importers' shared core, for zilla.yaml and AsyncAPI alike.

Holds `importing` (plans applied in one transaction, problems keyed by where they are) and `yaml_io` (one
loader and one writer for YAML and JSON documents from outside). `bindings.zilla` and `bindings.asyncapi` build
on it; it imports neither.
"""
