"""``python -m berth_dev.lint_imports [LINT-IMPORTS OPTIONS]``: Berth's import contracts, checked on
the product as pip installs it.

The contracts (``[tool.importlinter]`` in pyproject.toml) name modules as they are imported:
``berth.schemas``, ``berth.services``, ``berth.migrations``. In the repository those are the
top-level folders ``schemas/``, ``services/`` and ``migrations/``, which only the packaging puts
under ``berth``; import-linter reads a package's folder, so run in the checkout it would not find
them. This installs the product (without dependencies) from a copy of the checkout into a
temporary folder and runs lint-imports there, on the layout users get.

Exit status: lint-imports's (0 when every contract is kept); 1 when the product does not install.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path
from tempfile import TemporaryDirectory

IGNORED = (
    ".git",
    ".venv",
    ".cache",
    ".run",
    "build",
    "*.egg-info",
    "__pycache__",
    ".pytest_cache",
    ".hypothesis",
    ".import_linter_cache",
)
"""What the copy leaves out: git-ignored state. Without ``build`` in particular, files a former
build left there cannot slip into the installed package."""


def checkout() -> Path:
    """The repository this distribution runs from (``dev/berth_dev/lint_imports.py`` in it)."""
    return Path(__file__).resolve().parents[2]


def install_product(scratch: Path) -> Path:
    """Install the product of this checkout (no dependencies, no bytecode) into a folder under
    ``scratch`` and return that folder. It installs from a copy under ``scratch`` without the
    git-ignored state. Raises CalledProcessError, with pip's output, when it does not install."""
    source, installed = scratch / "source", scratch / "installed"
    shutil.copytree(checkout(), source, ignore=shutil.ignore_patterns(*IGNORED))
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "install",
            "--quiet",
            "--no-deps",
            "--no-build-isolation",
            "--no-compile",
            "--target",
            str(installed),
            str(source),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    return installed


def main(argv: list[str] | None = None) -> int:
    linter = Path(sys.executable).with_name("lint-imports")
    with TemporaryDirectory(prefix="berth-lint-") as scratch:
        try:
            installed = install_product(Path(scratch))
        except subprocess.CalledProcessError as exc:
            print(f"the product does not install: {exc.stdout}{exc.stderr}", file=sys.stderr)
            return 1
        arguments = [
            str(linter),
            "--no-cache",
            str(checkout() / "pyproject.toml"),
            *(sys.argv[1:] if argv is None else argv),
        ]
        return subprocess.run(arguments, cwd=installed).returncode


if __name__ == "__main__":
    sys.exit(main())
