"""Every package the code imports is declared in pyproject.toml: the project's packages, platform/ and manage.py in
its dependencies; tests/, bench/ and imports made for the type checker alone (`if TYPE_CHECKING:`) there or in the
dev extra.

A package that only arrives through another's requirements (h2 through Twisted's http2 extra) works until that other
package stops requiring it, and nothing in pyproject.toml says that the code needs it. The imports are read from the
source (every `import` statement, at any depth), and each is mapped to the distribution that installed the module,
through the files each installed distribution lists.
"""

from __future__ import annotations

import ast
import importlib.util
import sys
from collections.abc import Iterator
from functools import cache
from importlib import metadata
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from tests.conftest import ROOT
from tests.deployment.test_dependency_floors import project

RUNTIME_SOURCES = ("config", "bindings", "streams", "analytics", "platform", "manage.py")
DEV_SOURCES = ("tests", "bench")
# The modules of platform/ and bench/ import each other by file name (their folder is put on sys.path).
SCRIPT_FOLDERS = ("platform", "bench")


def python_files(sources: tuple[str, ...]) -> Iterator[Path]:
    for source in sources:
        path = ROOT / source
        if path.is_file():
            yield path
        else:
            yield from sorted(path.rglob("*.py"))


def is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def imported_names(tree: ast.AST, *, typing_only: bool = False) -> Iterator[tuple[str, bool]]:
    """(module name, only for the type checker) for each absolute import under `tree`."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and is_type_checking(node.test):
            for child in node.body:
                yield from imported_names(ast.Module(body=[child], type_ignores=[]), typing_only=True)
            for child in node.orelse:
                yield from imported_names(ast.Module(body=[child], type_ignores=[]), typing_only=typing_only)
            continue
        if isinstance(node, ast.Import):
            yield from ((alias.name, typing_only) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            yield node.module, typing_only
        yield from imported_names(node, typing_only=typing_only)


@cache
def first_party() -> frozenset[str]:
    names = {path.name for path in ROOT.iterdir() if (path / "__init__.py").exists()}
    names |= {path.stem for path in ROOT.glob("*.py")}
    for folder in SCRIPT_FOLDERS:
        names |= {path.stem for path in (ROOT / folder).glob("*.py")}
    return frozenset(names)


@cache
def owners() -> dict[Path, str]:
    """Each installed file, resolved, to the canonical name of the distribution that lists it."""
    found: dict[Path, str] = {}
    for distribution in metadata.distributions():
        name = canonicalize_name(distribution.metadata["Name"])
        for file in distribution.files or ():
            found[Path(str(distribution.locate_file(file))).resolve()] = name
    return found


def distribution_of(module: str) -> str | None:
    """The distribution that installed `module`, looking one level deeper through namespace packages (`google`)."""
    parts = module.split(".")
    for depth in range(1, len(parts) + 1):
        spec = importlib.util.find_spec(".".join(parts[:depth]))
        if spec is None:
            return None
        if spec.origin is not None and spec.origin not in ("built-in", "frozen"):
            return owners().get(Path(spec.origin).resolve())
    return None


def third_party_imports(sources: tuple[str, ...], *, typing_only_too: bool) -> dict[str, set[str]]:
    """Distribution -> the files under `sources` importing it (also for the type checker alone: `typing_only_too`)."""
    found: dict[str, set[str]] = {}
    for path in python_files(sources):
        for module, typing_only in imported_names(ast.parse(path.read_text(), str(path))):
            top = module.split(".")[0]
            if top in sys.stdlib_module_names or top in first_party() or (typing_only and not typing_only_too):
                continue
            distribution = distribution_of(module) or f"<nothing installed provides {module}>"
            found.setdefault(distribution, set()).add(str(path.relative_to(ROOT)))
    return found


def declared(*groups: str) -> set[str]:
    """The canonical names pyproject.toml declares in `groups` ("dependencies" or an extra's name)."""
    table = project()
    lines: list[str] = []
    for group in groups:
        lines.extend(table["dependencies"] if group == "dependencies" else table["optional-dependencies"][group])
    return {canonicalize_name(Requirement(line).name) for line in lines}


def missing(imports: dict[str, set[str]], allowed: set[str]) -> list[str]:
    return [
        f"{name} (imported by {', '.join(sorted(files))})" for name, files in imports.items() if name not in allowed
    ]


def test_it_declares_every_package_the_platform_imports() -> None:
    runtime = third_party_imports(RUNTIME_SOURCES, typing_only_too=False)
    assert "django" in runtime, "the scan found none of the platform's imports"
    undeclared = missing(runtime, declared("dependencies"))
    assert not undeclared, f"imported but not in pyproject.toml's dependencies: {undeclared}"


def test_it_declares_every_package_the_tests_benchmarks_and_type_checks_import() -> None:
    everything = third_party_imports(RUNTIME_SOURCES + DEV_SOURCES, typing_only_too=True)
    assert "pytest" in everything, "the scan found none of the tests' imports"
    undeclared = missing(everything, declared("dependencies", "dev"))
    assert not undeclared, f"imported but in neither pyproject.toml's dependencies nor its dev extra: {undeclared}"
