"""``python -m berth_dev.typecheck [MYPY OPTIONS]``: mypy on the product, with the configuration of
``[tool.mypy]`` in pyproject.toml (strict on ``berth.core``, ``berth.cells`` and ``berth.schemas``).

The product's modules are named as they install: ``schemas/``, ``services/`` and ``migrations/``
become ``berth.schemas``, ``berth.services`` and ``berth.migrations``, a mapping only the packaging
makes (the editable install does it with an import hook mypy does not run). So this lays out a
``berth`` package of symbolic links to the checkout's folders in a folder of its own under
``.cache``, checks it there, and reports each error at the checkout's own path of the file.

The errors mypy found when the check was introduced are listed in ``.ci/mypy-baseline.txt``
(file, message and code, without line numbers, so edits elsewhere in a file do not disturb it).
Only errors beyond that list fail the check; it says which entries mypy no longer finds, and
``--write-baseline`` rewrites the list (after fixes, so that it only shrinks).

Exit status: 0 when mypy finds no error beyond the baseline, 1 otherwise; mypy's own status when
it fails to run (2).
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from pathlib import Path
from tempfile import TemporaryDirectory

from berth_dev.lint_imports import checkout

MOUNTED = {"schemas": "schemas", "services": "services", "migrations": "migrations"}
"""Sub-package of ``berth`` → the checkout's folder it is installed from (as setup.py has it)."""


def lay_out(root: Path, tree: Path) -> Path:
    """A ``berth`` package in the empty folder ``tree`` whose entries link to the checkout
    ``root``'s files: ``berth/*`` and the mounted folders. Returns ``tree``."""
    package = tree / "berth"
    package.mkdir()
    for entry in (root / "berth").iterdir():
        if entry.name != "__pycache__":
            (package / entry.name).symlink_to(entry)
    for name, folder in MOUNTED.items():
        (package / name).symlink_to(root / folder)
    return tree


def checkout_path(line: str) -> str:
    """``line`` of mypy's output with a laid-out path of a mounted folder put back as the
    checkout's (``berth/schemas/x.py`` → ``schemas/x.py``)."""
    for name, folder in MOUNTED.items():
        prefix = f"berth/{name}/"
        if line.startswith(prefix):
            return folder + "/" + line[len(prefix) :]
    return line


BASELINE = Path(".ci") / "mypy-baseline.txt"
"""Known errors, relative to the checkout: one ``path: error: message  [code]`` a line."""

_LINE_NUMBER = re.compile(r"^([^:]+\.pyi?):\d+(?::\d+)?: ")


def error_key(line: str) -> str | None:
    """``path: error: message  [code]`` of an error line of mypy's output; None for other lines
    (notes, the summary)."""
    match = _LINE_NUMBER.match(line)
    if match is None or not line[match.end() :].startswith("error: "):
        return None
    return f"{match.group(1)}: {line[match.end() :]}"


def compare(errors: list[str], baseline: list[str]) -> tuple[list[str], list[str]]:
    """``(new, gone)``: error keys beyond the baseline's count of each, and baseline entries mypy
    no longer reports."""
    found, known = Counter(errors), Counter(baseline)
    return sorted((found - known).elements()), sorted((known - found).elements())


def main(argv: list[str] | None = None) -> int:
    arguments = list(sys.argv[1:] if argv is None else argv)
    write_baseline = "--write-baseline" in arguments
    arguments = [a for a in arguments if a != "--write-baseline"]
    root = checkout()
    (root / ".cache").mkdir(exist_ok=True)
    command = [
        sys.executable,
        "-m",
        "mypy",
        "--config-file",
        str(root / "pyproject.toml"),
        "--cache-dir",
        str(root / ".cache" / "mypy"),
        *arguments,
        "-p",
        "berth",
    ]
    with TemporaryDirectory(prefix="typecheck-", dir=root / ".cache") as scratch:
        done = subprocess.run(command, cwd=lay_out(root, Path(scratch)), capture_output=True, text=True)
    print(done.stderr, end="", file=sys.stderr)
    if done.returncode not in (0, 1):
        print(done.stdout, end="")
        return done.returncode
    lines = [checkout_path(line) for line in done.stdout.splitlines()]
    errors = [key for key in map(error_key, lines) if key is not None]
    baseline_file = root / BASELINE
    if write_baseline:
        baseline_file.write_text("".join(f"{key}\n" for key in sorted(errors)))
        print(f"typecheck: {len(errors)} known errors written to {BASELINE}")
        return 0
    baseline = baseline_file.read_text().splitlines() if baseline_file.exists() else []
    new, gone = compare(errors, baseline)
    if new:
        new_keys = set(new)
        for line in lines:
            if error_key(line) in new_keys:
                print(line)
        print(f"typecheck: {len(new)} error(s) beyond {BASELINE} ({len(errors)} found in all)")
        return 1
    if gone:
        print("\n".join(gone))
        print(
            f"typecheck: {len(gone)} error(s) of {BASELINE} are fixed: run `python -m berth_dev.typecheck "
            "--write-baseline` and commit the shorter list"
        )
    print(f"typecheck: no error beyond {BASELINE} ({len(errors)} known)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
