"""The linter as a test: `ruff check .` with the rules written down in pyproject.toml ([tool.ruff]) finds
nothing. Its function bounds (complexity, branches, statements) keep a function small; a file is as long as its one
idea needs."""
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing():
    done = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format", "concise", "."],
                          cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, f"ruff check . found:\n{done.stdout}{done.stderr}"
