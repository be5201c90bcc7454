"""One check for every adapter: is the installed library a release whose internals the adapter knows?

A release outside the supported range, or one that lacks an internal the adapter uses, is refused with one
error naming the installed version, the supported range and the command that installs a supported one.
"""

from __future__ import annotations

import importlib.metadata
from typing import Callable

from packaging.specifiers import SpecifierSet
from packaging.version import InvalidVersion, Version


class UnsupportedLibrary(RuntimeError):
    """An installed library is not one whose internals the provider was written against."""


def installed_version(distribution: str) -> str:
    """The version pip installed (the package's own metadata, the one a supported range is about)."""
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "(no package metadata)"


def in_range(version: str, supported: str) -> bool:
    try:
        return SpecifierSet(supported).contains(Version(version), prereleases=True)
    except InvalidVersion:
        return False


def require(library: str, version: str, supported: str, install: str, uses: str,
            missing: Callable[[], list[str]], error: type[Exception] = UnsupportedLibrary) -> None:
    """Raise ``error`` unless ``version`` is in ``supported`` and ``missing()`` finds nothing missing;
    ``uses`` says what the provider uses the library's internals for."""
    if not in_range(version, supported):
        raise error(f"{library} {version} is installed, but this provider {uses} and supports {supported} only; "
                    f"install a supported version: {install}")
    absent = missing()
    if absent:
        raise error(f"{library} {version} lacks internals this provider relies on ({'; '.join(absent)}); supported: "
                    f"{supported}; reinstall a supported version: {install}")
