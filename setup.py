"""Package discovery for the one `rudnn` distribution (metadata lives in pyproject.toml).

The repository keeps the three layers in three folders (DESIGN.md) that install under other
names: kerneldsl/ -> `kerneldsl`, backends/ -> `kerneldsl.backends`, ops/ -> `rudnn`. setuptools'
`packages.find` cannot rename folders, so this file finds every package under each folder
and maps it; a family or back end added later is shipped without touching a list.
"""
from setuptools import find_namespace_packages, setup

ROOTS = {"kerneldsl": "kerneldsl", "kerneldsl.backends": "backends", "rudnn": "ops"}


def packages() -> list:
    found = []
    for name, folder in ROOTS.items():
        found.append(name)
        # namespace packages too: template folders (data only) ship as packages of their own
        found += [f"{name}.{sub}" for sub in find_namespace_packages(folder, exclude=["*__pycache__*"])]
    return found


setup(package_dir=ROOTS, packages=packages())
