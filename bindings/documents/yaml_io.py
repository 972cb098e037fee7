"""YAML (and JSON) documents that come from outside, and the ones we write: one loader and one writer for both
importers and exporters (zilla.yaml, AsyncAPI).

Loading refuses, with a reason a user can act on: text that is not UTF-8, that is not valid YAML (or, with
`is_json`, strict JSON), that is nested too deeply for the parser (a `RecursionError` would otherwise be a 500),
that holds a scalar Python cannot make (a date 2020-13-01, an integer of thousands of digits), and, unless the
format allows them, YAML aliases (`*name`: a document that refers to itself, or one tiny as text and huge as
data). A format that allows aliases bounds what they expand to itself. Writing never emits aliases, so what we
export imports back under either rule.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

import yaml


class DocumentError(ValueError):
    """Why a document cannot be read; each importer says it under its own key."""


class _NoAliasLoader(yaml.SafeLoader):
    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
            raise yaml.composer.ComposerError(None, None, "aliases (*name) are not accepted here", mark)
        return super().compose_node(parent, index)


def load(text: str | bytes, *, aliases: bool = False, is_json: bool = False) -> object:
    """The document in `text`; DocumentError says why it cannot be read."""
    try:
        if isinstance(text, bytes):
            text = text.decode()
        if is_json:
            return json.loads(text)
        return yaml.load(text, Loader=yaml.SafeLoader if aliases else _NoAliasLoader)  # noqa: S506
    except (UnicodeDecodeError, json.JSONDecodeError, yaml.YAMLError, RecursionError) as exc:
        raise DocumentError("nested too deeply" if isinstance(exc, RecursionError) else str(exc)) from None
    except ValueError as exc:
        # A scalar that YAML types but Python cannot make (a date 2020-13-01, an integer past Python's 4300
        # digits, in JSON too): without this, a 500. Python's advice after `;` is not the user's.
        raise DocumentError(f"a value cannot be read: {str(exc).split(';')[0]}") from None


class _NoAliasDumper(yaml.SafeDumper):
    def ignore_aliases(self, data: Any) -> bool:
        return True


def dump(document: Mapping[str, Any]) -> str:
    """The document as YAML, keys in the order they were built, every shared object written out in full."""
    return yaml.dump(document, Dumper=_NoAliasDumper, sort_keys=False, allow_unicode=True)
