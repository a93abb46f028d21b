"""The package list, derived from the package map so no sub-package can drop out of the wheel.

The map (import name -> folder) has one owner: ``[tool.setuptools.package-dir]`` in
pyproject.toml. setuptools' own discovery cannot prefix a folder's packages with ``memsync.``, so
this file names every sub-folder of each mapped folder (a data folder such as ``servers/page/``
is a package too, as setuptools wants). Everything else about the build is in pyproject.toml.
"""

import tomllib
from pathlib import Path

from setuptools import find_namespace_packages, setup

ROOT = Path(__file__).resolve().parent
PACKAGE_DIR: dict[str, str] = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]

CACHES = ["__pycache__", "*.__pycache__"]

setup(packages=[f"{name}.{sub}" if sub else name
                for name, folder in PACKAGE_DIR.items()
                for sub in ["", *find_namespace_packages(str(ROOT / folder), exclude=CACHES)]])
