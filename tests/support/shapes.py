"""The list of objects a write may hold, for the tests that every writer refuses a field it does not know (the
API's, the zilla.yaml importer's and the AsyncAPI importer's): each maps every shape here to a misspelling, or
says why its format has no such object."""

from __future__ import annotations

from bindings import shapes

MEANT = "Unknown field; did you mean `{}`?"


def writable_shapes() -> set[type[shapes.Shape]]:
    """Every shape of `bindings.shapes` a write gives (one with a field that is not read-only)."""
    return {
        shape
        for shape in vars(shapes).values()
        if isinstance(shape, type)
        and issubclass(shape, shapes.Shape)
        and shape is not shapes.Shape
        and any(not field.read_only for field in shape().fields.values())
    }
