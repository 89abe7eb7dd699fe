"""Package discovery for the requested layout.

``schemas/``, ``services/`` and ``migrations/`` live at the top of the repository but install as
``berth.schemas``, ``berth.services`` and ``berth.migrations`` so that every import reads
``berth.<part>``. setuptools' declarative ``find`` cannot map directories that way, hence this
file; all other metadata is in pyproject.toml.
"""

from setuptools import find_packages, setup

ROOTS = {"berth": "berth", "berth.schemas": "schemas", "berth.services": "services",
         "berth.migrations": "migrations"}

packages, package_dir = [], {}
for package, directory in ROOTS.items():
    package_dir[package] = directory
    packages.append(package)
    packages += [f"{package}.{sub}" for sub in find_packages(directory)]

setup(packages=packages, package_dir=package_dir)
