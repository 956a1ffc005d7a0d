"""Fetch Debian packages without installing them: ``apt-get download`` + ``dpkg -x``.

The translated documentation in Debian's archive is the only parallel text these machines can
reach, and apt is the client that reaches it. Packages are downloaded one by one into
``CACHE/debs`` (so one missing package names itself) and unpacked into one tree ``CACHE/root``,
laid out as an installed system would be; both are kept for the next run.
"""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from tfspec.errors import TfspecError

NO_PACKAGE = ("Unable to locate package", "has no installation candidate", "No packages found")


@dataclass(frozen=True)
class Package:
    name: str
    version: str
    deb: Path


def _run(argv: list[str], cwd: Path | None = None) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, errors="replace")
    except FileNotFoundError:
        raise TfspecError(f"{argv[0]} not found: fetching a corpus needs a Debian-based system with apt and "
                          "dpkg; elsewhere use `tfspec data prepare` on your own files, or the shipped sample "
                          "(tfspec.data.sample_dir())") from None


def _apt_error(result: subprocess.CompletedProcess) -> str:
    lines = [ln for ln in (result.stderr + result.stdout).splitlines() if ln.startswith(("E:", "W:", "Err"))]
    return " / ".join(lines[-3:]) or f"exit status {result.returncode}"


def _download(name: str, debs: Path) -> subprocess.CompletedProcess:
    # As root apt drops to the `_apt` user, which may not write here: keep root instead.
    sandbox = ["-o", "APT::Sandbox::User=root"] if os.geteuid() == 0 else []
    return _run(["apt-get", "download", *sandbox, name], cwd=debs)


def _update() -> None:
    if os.geteuid() != 0:
        raise TfspecError("apt's package lists look stale or empty and `apt-get update` needs root: run "
                          "`sudo apt-get update` and try again")
    result = _run(["apt-get", "update"])
    if result.returncode:
        raise TfspecError(f"apt-get update failed ({_apt_error(result)}): is the network reachable?")


def download(name: str, cache: Path, *, force: bool = False) -> Package:
    """The ``.deb`` of package ``name`` in ``cache/debs``, downloaded unless already there."""
    debs = cache / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    found = sorted(debs.glob(f"{name}_*.deb"))
    if force:
        for deb in found:
            deb.unlink()
        found = []
    if not found:
        result = _download(name, debs)
        if result.returncode and any(m in result.stderr for m in NO_PACKAGE):
            _update()  # the lists may be missing or older than the archive
            result = _download(name, debs)
        if result.returncode:
            message = _apt_error(result)
            if any(m in message for m in NO_PACKAGE):
                raise TfspecError(f"Debian package {name!r} is not in apt's sources ({message}): this language "
                                  "or source may not be packaged; choose others with --sources")
            if "No space left" in message:
                raise TfspecError(f"disk full while downloading {name} into {debs}")
            raise TfspecError(f"could not download {name} ({message}): is the network reachable?")
        found = sorted(debs.glob(f"{name}_*.deb"))
        if not found:
            raise TfspecError(f"apt-get download {name} reported success but left no {name}_*.deb in {debs}")
    deb = found[-1]
    return Package(name, _field(deb, "Version"), deb)


def _field(deb: Path, field: str) -> str:
    result = _run(["dpkg-deb", "-f", str(deb), field])
    if result.returncode:
        raise TfspecError(f"{deb}: not a readable Debian package ({result.stderr.strip()}); run again with --force")
    return result.stdout.strip()


def extract(package: Package, cache: Path) -> None:
    """Unpack ``package`` into ``cache/root`` once; a marker file records a complete unpack."""
    root = cache / "root"
    marker = root / ".unpacked" / f"{package.name}_{package.version}"
    if not marker.exists():
        marker.parent.mkdir(parents=True, exist_ok=True)
        result = _run(["dpkg", "-x", str(package.deb), str(root)])
        if result.returncode:
            if "No space left" in result.stderr:
                raise TfspecError(f"disk full while unpacking {package.deb.name} into {root}")
            raise TfspecError(f"dpkg -x {package.deb.name} failed: {result.stderr.strip()}")
        marker.touch()


def fetch(names: list[str], cache: Path, *, force: bool = False, progress: bool = False) -> tuple[Path, list[Package]]:
    """Download and unpack ``names``; returns the unpacked tree and the packages with versions."""
    from tqdm import tqdm

    root = cache / "root"
    if force and root.exists():
        shutil.rmtree(root)
    try:
        packages = []
        for name in tqdm(names, desc="packages", unit="pkg", disable=not progress, leave=False):
            packages.append(download(name, cache, force=force))
            extract(packages[-1], cache)
    except OSError as e:
        if e.errno == errno.ENOSPC:
            raise TfspecError(f"disk full while fetching into {cache}") from None
        raise TfspecError(f"cannot write the download cache {cache}: {e}") from None
    return root, packages
