"""The list of packages Berth installs; everything else about the packaging is in pyproject.toml.

The event contract (``schemas/``), the services (``services/``) and the audit store's migrations
(``migrations/``) are top-level folders of the repository that install as ``berth.schemas``,
``berth.services`` and ``berth.migrations`` (``[tool.setuptools.package-dir]``). setuptools needs
every package named, and its declarative package discovery cannot put a prefix in front of the
names it finds, so the names are computed here from the folders.
"""

from setuptools import find_namespace_packages, setup

MOUNTED = {"berth.schemas": "schemas", "berth.services": "services", "berth.migrations": "migrations"}
"""Installed package name → the repository folder it is built from."""


def _packages_in(where: str, include: tuple[str, ...] = ("*",)) -> list[str]:
    # Namespace discovery, so that data folders (schemas/jsonschema, schemas/examples) count as
    # packages whose files package-data can name, as setuptools' own discovery does.
    return find_namespace_packages(where=where, include=list(include), exclude=["*__pycache__*"])


def product_packages() -> list[str]:
    """``berth`` and its sub-packages, then each mounted folder's packages under its berth name."""
    packages = _packages_in(".", ("berth", "berth.*"))
    for name, folder in MOUNTED.items():
        packages += [name, *(f"{name}.{sub}" for sub in _packages_in(folder))]
    return sorted(packages)


setup(packages=product_packages())
