"""The shape of the tree, kept by tests: the library stands alone, settings are declared once, and the entry point
only wires (function size is the linter's: tests/test_lint.py); and the direction of imports: the decoding library
(dico/'s top level) imports neither the embedded model's making (dico/embedded/)
nor measuring (dico/bench/), the making does not import measuring, and figures never import torch."""
import ast
import re
import subprocess
import sys
from pathlib import Path

import pytest

from dico.settings import DiCoSettings, own_specs

ROOT = Path(__file__).resolve().parents[1]
SOURCES = [p for p in ROOT.rglob("*.py") if not {"tests", ".venv", ".git", "build"} & set(p.relative_to(ROOT).parts)]
LIBRARY = [p for p in SOURCES if p.relative_to(ROOT).parts[0] == "dico"]


def imported_modules(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


@pytest.mark.parametrize("path", LIBRARY, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_library_module_imports_gradio_or_plotly(path):
    assert not imported_modules(path) & {"gradio", "plotly", "pandas", "dico_ui", "visuals"}


def imported_names(path: Path) -> set[str]:
    """Every module a file imports, dotted in full, wherever the import stands (inside a function too):
    ``from dico import bench`` names ``dico.bench``, a relative import is resolved against the file's package,
    and a string that is a whole ``dico.*`` module path (``importlib.import_module``'s argument, a lazy-export
    table) counts as an import of it."""
    package = ".".join(path.relative_to(ROOT).with_suffix("").parts[:-1])
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1]) if node.level else ""
            module = ".".join(part for part in (base, node.module) if part)
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and \
                re.fullmatch(r"dico(\.\w+)+", node.value):
            names.add(node.value)
    return names


def within(names: set[str], *packages: str) -> set[str]:
    return {n for n in names if any(n == p or n.startswith(p + ".") for p in packages)}


TOP_LEVEL = [p for p in LIBRARY if p.parent == ROOT / "dico"]
EMBEDDED = sorted((ROOT / "dico" / "embedded").rglob("*.py"))


@pytest.mark.parametrize("path", TOP_LEVEL, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_decoding_library_imports_neither_the_embedded_models_making_nor_measuring(path):
    assert not within(imported_names(path), "dico.embedded", "dico.bench")


@pytest.mark.parametrize("path", EMBEDDED, ids=lambda p: str(p.relative_to(ROOT)))
def test_the_embedded_models_making_does_not_import_measuring(path):
    assert not within(imported_names(path), "dico.bench")


@pytest.mark.parametrize("path", LIBRARY, ids=lambda p: str(p.relative_to(ROOT)))
def test_nothing_in_dico_at_any_depth_imports_gradio_or_plotly(path):
    assert not within(imported_names(path), "gradio", "plotly")


@pytest.mark.parametrize("path", sorted((ROOT / "visuals").rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_figure_imports_torch(path):
    assert not within(imported_names(path), "torch", "transformers")


def test_the_direction_guard_sees_lazy_relative_and_from_package_imports(tmp_path, monkeypatch):
    fake = tmp_path / "dico" / "loop.py"
    fake.parent.mkdir()
    fake.write_text("def later():\n    from dico import bench\n    from .embedded.tasks import check\n"
                    "    import importlib; importlib.import_module('dico.bench.tables')\n"
                    "    import plotly.graph_objects\nMESSAGE = 'run python -m dico.embedded.train'\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert within(imported_names(fake), "dico.embedded", "dico.bench") == {
        "dico.bench", "dico.embedded.tasks", "dico.embedded.tasks.check", "dico.bench.tables"}
    assert within(imported_names(fake), "gradio", "plotly") == {"plotly.graph_objects"}


@pytest.mark.subprocess
def test_importing_dico_and_its_trace_loads_neither_gradio_nor_plotly():
    code = ("import sys, dico, dico.trace, dico.settings; dico.Trace; "
            "print(sorted(m for m in ('gradio', 'plotly', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"          # torch too stays out until a model or the loop is used


# Setting names that are also the names of other things, so a word search cannot tell them apart: the
# Conquer phase, a step's seed positions, guidance weights and Divide shortcut commits (trace fields), a figure's
# panel gap.
OTHER_MEANINGS = {"conquer", "seeds", "guidance", "shortcut", "gap"}


@pytest.mark.parametrize("name", [s.name for s in own_specs(DiCoSettings) if s.name not in OTHER_MEANINGS])
def test_a_dico_setting_is_named_in_at_most_two_source_files(name):
    word = re.compile(rf"\b{name}\b")
    files = sorted(str(p.relative_to(ROOT)) for p in SOURCES if word.search(p.read_text()))
    assert len(files) <= 2, files


def test_the_entry_point_only_wires():
    """app.py builds the page from dico_ui and launches it; the size of everything else is ruff's (tests/test_lint.py:
    complexity, branches and statements per function, not lines per file)."""
    assert len((ROOT / "app.py").read_text().splitlines()) <= 120


def test_no_test_patches_sys_path():
    patching = re.compile(r"sys\.path\s*(\.(insert|append|extend)\b|\[|\+?=)")
    offenders = [p.name for p in (ROOT / "tests").rglob("*.py")
                 if patching.search(p.read_text()) and p.name != Path(__file__).name]
    assert not offenders
