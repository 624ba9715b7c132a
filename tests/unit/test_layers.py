"""The package's layers hold: the import-linter contracts in pyproject.toml pass, no two of
the package's files import each other, directly or around a loop, counting imports written
inside functions (only ``TYPE_CHECKING`` blocks are left out), and an import inside a
function is there only to defer torch, saying so."""

from __future__ import annotations

import ast
import os
from pathlib import Path

import grimp
from importlinter.cli import lint_imports

ROOT = Path(__file__).resolve().parents[2]


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


def local_imports(source: str) -> list[tuple[int, str]]:
    """(line, text) of each import written inside a function, outside ``TYPE_CHECKING``."""
    tree = ast.parse(source)
    lines = source.split("\n")
    typing_only = {id(node) for block in ast.walk(tree)
                   if isinstance(block, ast.If) and "TYPE_CHECKING" in ast.unparse(block.test)
                   for node in ast.walk(block)}
    found = set()
    for function in ast.walk(tree):
        if isinstance(function, (ast.FunctionDef, ast.AsyncFunctionDef)):
            for node in ast.walk(function):
                if isinstance(node, (ast.Import, ast.ImportFrom)) and id(node) not in typing_only:
                    found.add((node.lineno, lines[node.lineno - 1].strip()))
    return sorted(found)


# Why an import may sit inside a function: torch, or a package or module of ours that the
# first frame has no use for (the gguf reader, numpy, jinja2, rich's Markdown, the readers of
# transformers folders, the generation session).
DEFERRED_REASONS = ("deferred: imports torch", "deferred: imports gguf", "deferred: imports numpy",
                    "deferred: imports jinja2", "deferred: off the first frame")


def test_an_import_inside_a_function_only_defers_what_the_first_frame_does_not_need():
    undeclared = [f"{path.relative_to(ROOT)}:{line}: {text}"
                  for path in sorted((ROOT / "minigpt_tui").rglob("*.py"))
                  for line, text in local_imports(path.read_text("utf-8"))
                  if not any(reason in text for reason in DEFERRED_REASONS)]
    assert undeclared == []


def test_the_local_import_check_sees_one_without_its_reason():
    source = "def f():\n    import json\n    import torch  # deferred: imports torch\n"
    assert local_imports(source) == [(2, "import json"), (3, "import torch  # deferred: imports torch")]
