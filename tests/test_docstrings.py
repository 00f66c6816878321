"""The public API states its contract in its docstrings (numpydoc, see CONTRIBUTING.md).

Checked from the source with :mod:`ast` (nothing is imported): every public module, class,
function and method has a docstring; a public function that takes parameters has a
``Parameters`` section; no docstring quotes timings, issue or session numbers or result
folders. Names not yet up to the contract are listed in ``docstring_baseline.txt``; the list
may only shrink.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: The public trees: ``src/orderedstream`` and the three mounted as its subpackages.
TREES = (ROOT / "src" / "orderedstream", ROOT / "python_datasource", ROOT / "statestore",
         ROOT / "sinks")
BASELINE = Path(__file__).with_name("docstring_baseline.txt")
#: What a docstring must not say: timings, issue or session numbers, result folders.
FORBIDDEN = re.compile(r"\b\d+(?:[.,]\d+)?\s?(?:us|µs|ms)\b|\bissue\s*#?\d|#\d{2,}\b"
                       r"|\bsessions?\s+\d|benchmarks/results", re.IGNORECASE)


def _public_modules() -> Iterator[tuple[str, Path]]:
    for tree in TREES:
        for path in sorted(tree.rglob("*.py")):
            parts = path.relative_to(tree.parent).with_suffix("").parts
            if any(p.startswith("_") and p not in ("__init__", "__main__") for p in parts):
                continue
            yield ".".join(p for p in parts if p != "__init__"), path


def _takes_parameters(node: ast.FunctionDef | ast.AsyncFunctionDef, method: bool) -> bool:
    args = node.args
    names = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
    if method and names and names[0] in ("self", "cls"):
        names = names[1:]
    return bool(names or args.vararg or args.kwarg)


def _is_property(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    return any(isinstance(d, ast.Name) and d.id in ("property", "cached_property")
               or isinstance(d, ast.Attribute) and d.attr in ("setter", "cached_property")
               for d in node.decorator_list)


def violations(source: str, module: str) -> set[str]:
    """The contract's breaches in one module's ``source``, as ``"<name>: <what>"`` lines."""
    found: set[str] = set()
    tree = ast.parse(source)

    def check(node: ast.AST, name: str, method: bool = False) -> None:
        doc = ast.get_docstring(node)  # type: ignore[arg-type]
        if not doc:
            found.add(f"{name}: no docstring")
            return
        if FORBIDDEN.search(doc):
            found.add(f"{name}: measured figure or reference")
        if (isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and not _is_property(node)
                and _takes_parameters(node, method) and "Parameters\n" not in doc):
            found.add(f"{name}: no Parameters section")

    check(tree, module)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) \
                and not node.name.startswith("_"):
            check(node, f"{module}.{node.name}")
            if isinstance(node, ast.ClassDef):
                for member in node.body:
                    if isinstance(member, ast.FunctionDef | ast.AsyncFunctionDef) \
                            and not member.name.startswith("_"):
                        check(member, f"{module}.{node.name}.{member.name}", method=True)
    return found


def all_violations() -> set[str]:
    return {v for module, path in _public_modules()
            for v in violations(path.read_text(encoding="utf-8"), module)}


def _baseline() -> set[str]:
    return {line for line in BASELINE.read_text(encoding="utf-8").splitlines()
            if line and not line.startswith("#")}


def test_no_new_breach_of_the_docstring_contract() -> None:
    new = sorted(all_violations() - _baseline())
    assert not new, "public API without its contract (see CONTRIBUTING.md):\n" + "\n".join(new)


def test_the_baseline_lists_only_open_breaches() -> None:
    fixed = sorted(_baseline() - all_violations())
    assert not fixed, f"fixed, remove from {BASELINE.name}:\n" + "\n".join(fixed)


def test_the_checker_finds_each_breach() -> None:
    source = '''
def bare(x): pass

def timed(x):
    """Do it in 12 ms, see #00.

    Parameters
    ----------
    x : int
    """

def unparametrized(x):
    """Do it."""

class Thing:
    """A thing."""
    def go(self, y):
        """Go."""
    def _private(self, z): pass
'''
    assert violations(source, "m") == {
        "m: no docstring", "m.bare: no docstring", "m.timed: measured figure or reference",
        "m.unparametrized: no Parameters section", "m.Thing.go: no Parameters section"}
