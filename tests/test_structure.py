"""The shape of the tree that issue 12 asked for, kept by tests: the library stands alone, settings are
declared once, the entry point only wires, and no module grows past what a reader can hold."""
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


def test_importing_dico_and_its_trace_loads_neither_gradio_nor_plotly():
    code = ("import sys, dico, dico.trace, dico.settings; dico.Trace; "
            "print(sorted(m for m in ('gradio', 'plotly', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"          # torch too stays out until a model or the loop is used


# Setting names that are also the names of other things, so a word search cannot tell them apart: the
# Conquer phase, a step's seed positions and guidance weights (trace fields), a figure's panel gap.
OTHER_MEANINGS = {"conquer", "seeds", "guidance", "gap"}


@pytest.mark.parametrize("name", [s.name for s in own_specs(DiCoSettings) if s.name not in OTHER_MEANINGS])
def test_a_dico_setting_is_named_in_at_most_two_source_files(name):
    word = re.compile(rf"\b{name}\b")
    files = sorted(str(p.relative_to(ROOT)) for p in SOURCES if word.search(p.read_text()))
    assert len(files) <= 2, files


def test_the_entry_point_only_wires_and_no_module_is_over_400_lines():
    assert len((ROOT / "app.py").read_text().splitlines()) <= 120
    long = {str(p.relative_to(ROOT)): n for p in SOURCES if (n := len(p.read_text().splitlines())) > 400}
    assert not long


def test_no_test_patches_sys_path():
    patching = re.compile(r"sys\.path\s*(\.(insert|append|extend)\b|\[|\+?=)")
    offenders = [p.name for p in (ROOT / "tests").rglob("*.py")
                 if patching.search(p.read_text()) and p.name != Path(__file__).name]
    assert not offenders
