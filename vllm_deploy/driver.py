"""Driver package state on a node, from `dpkg-query`, and where NVIDIA's apt repository lives.

Pure text processing: the nvidia_driver role reads the node with one read-only command and these
functions decide what to unhold, install and hold (tests/unit/test_driver.py).
"""

from __future__ import annotations

import re

# What `dpkg-query` prints per package: the nvidia_driver role and rebuild-node run it through
# dpkg_query_argv() (filter vllm_dpkg_query_argv); parse_dpkg_query reads it. dpkg-query expands
# the \t and \n escapes itself.
DPKG_QUERY_FORMAT = r"${Package}\t${Version}\t${db:Status-Abbrev}\n"

# The driver's packages in both sources (Debian non-free and NVIDIA's repo). Deliberately not
# nvidia-support, nvidia-installer-cleanup or glx-*: they carry their own version series.
DRIVER_PACKAGE_RE = r"^(nvidia-(smi|alternative|legacy-check|kernel-dkms|kernel-support|persistenced|driver.*|"\
                    r"open.*|utils.*|compute-utils.*|dkms.*|kernel-common.*|kernel-source.*|firmware.*|modprobe|"\
                    r"settings|xconfig)|libnvidia-.*|libcuda1|firmware-nvidia-gsp|cuda-drivers.*)$"

# NVIDIA's CUDA repository names its distributions like this (developer.download.nvidia.com/compute/cuda/repos/).
_NVIDIA_REPO_DISTROS = {("Ubuntu", "22"): "ubuntu2204", ("Ubuntu", "24"): "ubuntu2404", ("Debian", "12"): "debian12"}


class DriverStateError(ValueError):
    """Input that is not what the caller said it was."""


def upstream_version(version: str | None) -> str:
    """'535.261.03-1' -> '535.261.03'; '580.95.05-0ubuntu1' -> '580.95.05'; '580.95.05' stays."""
    if not version:
        return ""
    return str(version).split(":", 1)[-1].split("-", 1)[0]


def dpkg_query_argv(packages: list[str] | tuple[str, ...] | str) -> list[str]:
    """argv of the read-only `dpkg-query -W` for these package names or glob patterns."""
    names = [packages] if isinstance(packages, str) else list(packages)
    if not names or not all(isinstance(n, str) and n for n in names):
        raise DriverStateError(f"dpkg-query needs package names or patterns, got {packages!r}")
    return ["dpkg-query", "-W", f"-f={DPKG_QUERY_FORMAT}", *names]


def installed_version(dpkg_text: str, package: str) -> str:
    """The installed version of `package` in dpkg_query_argv output; "" when absent, removed or config-only."""
    pkg = parse_dpkg_query(dpkg_text).get(package)
    return pkg["version"] if pkg and pkg["installed"] else ""


def parse_dpkg_query(text: str) -> dict[str, dict]:
    """`dpkg-query -W -f=DPKG_QUERY_FORMAT` -> {package: {version, installed, held}}.

    The status abbreviation is want/status/error: "hi " = held and installed, "ii " = installed,
    "un " = known but not installed, "rc " = removed with config files left.
    """
    out: dict[str, dict] = {}
    for line in (text or "").splitlines():
        if not line.strip():
            continue
        cells = line.split("\t")
        if len(cells) != 3:
            raise DriverStateError(f"dpkg-query line has {len(cells)} fields, expected 3: {line!r}")
        name, version, abbrev = cells[0].strip(), cells[1].strip(), cells[2]
        name = name.split(":", 1)[0]  # libcuda1:amd64 -> libcuda1
        installed = abbrev[1:2] in ("i", "F", "H", "U", "W", "t")  # not "n" (not installed), "c" (config only)
        out[name] = {"version": version, "installed": installed and bool(version), "held": abbrev[:1] == "h"}
    return out


def driver_state(dpkg_text: str, pinned_version: str, anchor: str = "nvidia-smi",
                 name_re: str = DRIVER_PACKAGE_RE) -> dict:
    """What the role needs to know about the driver packages on a node.

    pinned_version: the exact Debian version (535.261.03-1) or NVIDIA's upstream version (580.95.05);
    a package is "at the pin" when its upstream version equals the pin's.
    Returns installed_version (of `anchor`, None if absent), at_pin / other_version / held (sorted
    names of installed driver packages), upgrade (an older or newer driver is installed) and fresh.
    """
    if not pinned_version:
        raise DriverStateError("pinned_version is empty: set nvidia_driver.version / debian_version in versions.yaml")
    pin = upstream_version(pinned_version)
    packages = parse_dpkg_query(dpkg_text)
    rx = re.compile(name_re)
    driver = {n: p for n, p in packages.items() if rx.match(n) and p["installed"]}
    at_pin = sorted(n for n, p in driver.items() if upstream_version(p["version"]) == pin)
    other = sorted(n for n, p in driver.items() if upstream_version(p["version"]) != pin)
    anchor_pkg = driver.get(anchor)
    installed_version = anchor_pkg["version"] if anchor_pkg else None
    return {
        "pinned_version": str(pinned_version),
        "pinned_upstream": pin,
        "installed_version": installed_version,
        "installed_upstream": upstream_version(installed_version) or None,
        "at_pin": at_pin,
        "other_version": other,
        "held": sorted(n for n, p in driver.items() if p["held"]),
        "upgrade": bool(installed_version) and upstream_version(installed_version) != pin,
        "fresh": installed_version is None,
    }


def nvidia_repo_distro(distribution: str, major_version: str | int) -> str:
    """'Ubuntu', '22' -> 'ubuntu2204': the directory of NVIDIA's CUDA apt repository for this OS."""
    key = (str(distribution), str(major_version))
    if key not in _NVIDIA_REPO_DISTROS:
        supported = ", ".join(f"{d} {v}" for d, v in _NVIDIA_REPO_DISTROS)
        raise DriverStateError(f"NVIDIA's CUDA repository has no packages for {distribution} {major_version} "
                               f"(supported here: {supported}); use nvidia_driver.source: debian on Debian")
    return _NVIDIA_REPO_DISTROS[key]
