"""The package's layers hold: the import-linter contracts in pyproject.toml pass, and no two
of the package's files import each other, directly or around a loop, counting imports
written inside functions (only ``TYPE_CHECKING`` blocks are left out)."""

from __future__ import annotations

import os
from pathlib import Path

import grimp
from importlinter.cli import lint_imports

ROOT = Path(__file__).resolve().parents[1]


def test_the_layer_contracts_pass():
    here = os.getcwd()
    os.chdir(ROOT)  # lint-imports reads pyproject.toml from the working folder
    try:
        assert lint_imports(no_cache=True) == 0
    finally:
        os.chdir(here)


def cycles(graph: grimp.ImportGraph, modules: set[str]) -> list[list[str]]:
    """The groups of modules that reach each other through imports (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        index[module] = low[module] = len(index)
        stack.append(module)
        for other in sorted(graph.find_modules_directly_imported_by(module) & modules):
            if other not in index:
                visit(other)
                low[module] = min(low[module], low[other])
            elif other in stack:
                low[module] = min(low[module], index[other])
        if low[module] == index[module]:
            group = []
            while True:
                other = stack.pop()
                group.append(other)
                if other == module:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for module in sorted(modules):
        if module not in index:
            visit(module)
    return found


def test_no_import_cycle_between_the_package_files():
    graph = grimp.build_graph("minigpt_tui", exclude_type_checking_imports=True)
    modules = set(graph.modules)
    assert "minigpt_tui.engine.training.trainer" in modules
    assert cycles(graph, modules) == []


def test_the_cycle_finder_finds_a_loop():
    graph = grimp.ImportGraph()
    for name in ("a", "a.x", "a.y", "a.z"):
        graph.add_module(name)
    graph.add_import(importer="a.x", imported="a.y")
    graph.add_import(importer="a.y", imported="a.x")
    graph.add_import(importer="a.z", imported="a.x")
    assert cycles(graph, {"a.x", "a.y", "a.z"}) == [["a.x", "a.y"]]
