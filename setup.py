"""Packages are found, not listed: `backends/` and `specs/` sit at the top of the repository
but install inside the tfspec namespace (so no top-level `backends` package collides with other
installs), and a hand-kept list once shipped wheels without new subpackages. pyproject.toml
holds everything else."""

from setuptools import find_packages, setup

ROOTS = {"tfspec": "tfspec", "tfspec.backends": "backends", "tfspec.specs": "specs"}


def packages() -> list[str]:
    """Every package under each root, named inside the tfspec namespace; a subpackage of one
    root that is another root's folder (none today) would be found once, under its own root."""
    found = []
    for name, folder in ROOTS.items():
        found += [name] + [f"{name}.{sub}" for sub in find_packages(folder) if f"{name}.{sub}" not in ROOTS]
    return sorted(set(found))


setup(package_dir=ROOTS, packages=packages())
