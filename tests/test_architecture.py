"""The package's shape, checked from its source: one import root, layers that import only
downward, no import cycle between files (function-level imports included), modules of one job
(450 lines at most), py4j reached from one module, and a wheel with one root."""

from __future__ import annotations

import ast
import os
import re
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
#: Import name -> source folder, as pyproject.toml's package-dir mounts them.
MOUNTS = {
    "orderedstream": ROOT / "src" / "orderedstream",
    "orderedstream.python_datasource": ROOT / "python_datasource",
    "orderedstream.statestore": ROOT / "statestore",
    "orderedstream.sinks": ROOT / "sinks",
}
#: Layer of each module prefix (longest prefix wins); a module imports only its own layer and
#: the ones below it. Libraries do not import each other.
LAYERS = {
    "orderedstream": 0,
    "orderedstream.core": 0,
    "orderedstream.python_datasource": 1,
    "orderedstream.statestore": 1,
    "orderedstream.sinks": 1,
    "orderedstream.statestore.ordered": 2,  # the ordered stage: integrates the three libraries
    "orderedstream.dev": 3,  # local services and the shim's build
    "orderedstream.app": 4,  # CLI, main job, chaos suite
}
LIBRARIES = ("orderedstream.python_datasource", "orderedstream.statestore", "orderedstream.sinks")
MAX_LINES = 450


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for name, folder in MOUNTS.items():
        for path in sorted(folder.rglob("*.py")):
            rel = path.relative_to(folder).with_suffix("").parts
            if rel[-1] == "__init__":
                rel = rel[:-1]
            module = ".".join((name, *rel))
            if module not in found or name != "orderedstream":
                found[module] = path
    return found


MODULES = _modules()


def _imports(module: str, path: Path) -> set[str]:
    """Every project module ``module`` imports, wherever the import statement stands."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parent = parts[: len(parts) - node.level + 1]
                base = ".".join([*parent, *([base] if base else [])])
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base
                     for alias in node.names]
        else:
            continue
        for name in names:
            while name and name not in MODULES:
                name = name.rpartition(".")[0]
            if name and name != module and not module.startswith(name + "."):
                targets.add(name)  # a package's own __init__ runs first anyway: not an edge
    return targets


GRAPH = {module: _imports(module, path) for module, path in MODULES.items()}


def _layer(module: str) -> tuple[int, str]:
    prefix = max((p for p in LAYERS if module == p or module.startswith(p + ".")), key=len)
    return LAYERS[prefix], prefix


def test_every_import_goes_down_the_layers() -> None:
    wrong = []
    for module, targets in GRAPH.items():
        level, group = _layer(module)
        for target in targets:
            t_level, t_group = _layer(target)
            sideways = (group in LIBRARIES and t_group in LIBRARIES and t_group != group)
            if t_level > level or sideways:
                wrong.append(f"{module} ({group}) imports {target} ({t_group})")
    assert not wrong, "\n".join(sorted(wrong))


def test_no_import_cycle_between_files() -> None:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(node: str) -> None:  # Tarjan's strongly connected components
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in GRAPH[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for module in GRAPH:
        if module not in index:
            visit(module)
    assert not cycles, f"import cycles: {cycles}"


def test_checker_sees_a_cycle_and_a_function_level_import(tmp_path: Path) -> None:
    """The graph counts imports inside functions, so a cycle hidden there is still found."""
    source = tmp_path / "m.py"
    source.write_text("def f():\n    from orderedstream.app.cli import main\n")
    assert _imports("orderedstream.core.errors", source) == {"orderedstream.app.cli"}


def test_modules_stay_small() -> None:
    files = [*MODULES.values(), *ROOT.joinpath("tests").rglob("*.py"),
             *ROOT.joinpath("benchmarks").rglob("*.py"), *ROOT.joinpath("src").glob("*.py")]
    big = {str(p.relative_to(ROOT)): n for p in files
           if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not big, f"modules over {MAX_LINES} lines: {big}"


#: The modules that reach py4j: the shim's placement (with the jar the user adds) and the
#: embedded local session's tuning.
PY4J_MODULES = ("orderedstream.core.jvm", "orderedstream.dev.local.jvm")


def test_only_the_jvm_modules_reach_py4j() -> None:
    allowed = {MODULES[name] for name in PY4J_MODULES}
    users = [str(p.relative_to(ROOT)) for p in MODULES.values()
             if p not in allowed and ("import py4j" in p.read_text()
                                      or "from py4j" in p.read_text()
                                      or "._jvm" in p.read_text())]
    assert not users, f"py4j outside {PY4J_MODULES}: {users}"


#: What a library path must not use: PySpark's private names (``_jvm``, ``_jsc``, ``_jdf``,
#: ``_gateway``, private modules or functions, py4j's converters, ``vectorized_udf``).
PRIVATE_PYSPARK = re.compile(r"pyspark\.[a-z_.]*\._|\._jvm\b|\._jsc\b|\._jdf\b|\._gateway\b|"
                             r"INPUT_CONVERTER|vectorized_udf|from pyspark\.[a-z.]* import _")
#: Library paths: the libraries, the foundation and the application (the shim's placement,
#: ``core.jvm``, is the one exception: it runs only with the shim's jar on the classpath).
LIBRARY_PATHS = (*LIBRARIES, "orderedstream.core", "orderedstream.app")


def test_library_paths_use_public_pyspark_api_only() -> None:
    found = []
    for module, path in MODULES.items():
        if module == "orderedstream.core.jvm" or not any(
                module == p or module.startswith(p + ".") for p in LIBRARY_PATHS):
            continue
        for number, line in enumerate(path.read_text().splitlines(), 1):
            if PRIVATE_PYSPARK.search(line.split("#", 1)[0]):
                found.append(f"{path.relative_to(ROOT)}:{number}: {line.strip()}")
    assert not found, "private PySpark API on a library path:\n" + "\n".join(found)


def test_library_paths_do_not_import_the_local_tuning() -> None:
    """The fork server, the worker daemon, ``JOB_CONF`` and the session tuning of the embedded
    local session (``orderedstream.dev.local``) are used by the embedded session only."""
    wrong = [f"{module} imports {target}" for module, targets in GRAPH.items()
             if any(module == p or module.startswith(p + ".") for p in LIBRARY_PATHS)
             for target in targets if target.startswith("orderedstream.dev.local")]
    assert not wrong, "\n".join(sorted(wrong))


def test_wheel_installs_one_root_and_the_registration_modules(tmp_path: Path) -> None:
    """``pip install .`` puts ``orderedstream`` and the ``pyspark_*`` modules at top level; the
    native reader goes inside ``orderedstream`` (built with scripts/bootstrap.sh's cargo target
    folder, so only the extension's own crate is compiled again)."""
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "orderedstream"
    env = {**os.environ, "CARGO_TARGET_DIR": os.environ.get(
        "ORDEREDSTREAM_CARGO_TARGET_DIR", str(cache / "cargo-target"))}
    cargo_bin = Path(os.environ.get("CARGO_HOME", Path.home() / ".cargo")) / "bin"
    if shutil.which("cargo") is None and (cargo_bin / "cargo").exists():  # as bootstrap.sh
        env["PATH"] = f"{cargo_bin}{os.pathsep}{env.get('PATH', '')}"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps",
                    "-q", "-w", str(tmp_path), str(ROOT)], check=True, capture_output=True,
                   env=env)
    (wheel,) = tmp_path.glob("orderedstream-*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
    top = {name.split("/")[0] for name in names if not name.split("/")[0].endswith(".dist-info")}
    assert top == {"orderedstream", "pyspark_orderedkafka.py", "pyspark_fencedparquet.py",
                   "pyspark_fenceddelta.py", "pyspark_rocksstate.py"}
    packaged = {n.removesuffix("/__init__.py").replace("/", ".") for n in names
                if n.endswith("/__init__.py")}
    expected = {m for m, p in MODULES.items() if p.name == "__init__.py"}
    assert packaged == expected, f"missing from the wheel: {expected - packaged}"
    native = [n for n in names if n.startswith("orderedstream/_kafka_native")]
    assert len(native) == 1 and native[0].endswith(".so"), \
        f"the native Kafka reader is not in the wheel (needs cargo): {native}"
