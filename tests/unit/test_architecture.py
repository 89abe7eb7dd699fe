"""The layering rules of DESIGN §2 and §8, checked by import-linter on every test run (on the
product as pip installs it: see berth_dev.lint_imports)."""

from __future__ import annotations

import subprocess
import sys


def test_import_contracts_hold():
    result = subprocess.run(
        [sys.executable, "-m", "berth_dev.lint_imports"], capture_output=True, text=True, timeout=180
    )
    assert result.returncode == 0, result.stdout + result.stderr
