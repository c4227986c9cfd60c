"""Driver package state from dpkg-query: what the nvidia_driver role unholds, installs and holds.

The capture is real (tests/fixtures/dpkg/SOURCES.md); the upgrade case edits it the way apt does.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from vllm_deploy.driver import (
    DriverStateError,
    dpkg_query_argv,
    driver_state,
    installed_version,
    nvidia_repo_distro,
    parse_dpkg_query,
    upstream_version,
)

CAPTURE = (Path(__file__).resolve().parents[1] / "fixtures" / "dpkg" / "bookworm-535.261.03-held.txt").read_text()
DRIVER_535_261 = ["libcuda1", "libnvidia-ml1", "libnvidia-pkcs11-openssl3", "libnvidia-ptxjitcompiler1",
                  "nvidia-alternative", "nvidia-legacy-check", "nvidia-smi"]


@pytest.mark.parametrize("version,upstream", [
    ("535.261.03-1", "535.261.03"),
    ("535.309.01-0+deb12u1", "535.309.01"),
    ("580.95.05-0ubuntu1", "580.95.05"),
    ("580.95.05", "580.95.05"),
    ("1:580.95.05-1", "580.95.05"),
    (None, ""),
])
def test_upstream_version(version, upstream):
    assert upstream_version(version) == upstream


def test_parse_capture_ignores_known_but_absent_packages():
    packages = parse_dpkg_query(CAPTURE)
    assert packages["nvidia-smi"] == {"version": "535.261.03-1", "installed": True, "held": True}
    assert packages["libnvidia-ml1"] == {"version": "535.261.03-1", "installed": True, "held": False}
    assert packages["nvidia-kernel-dkms"]["installed"] is False


def test_same_pin_is_neither_fresh_nor_upgrade():
    state = driver_state(CAPTURE, "535.261.03-1")
    assert state["installed_version"] == "535.261.03-1"
    assert (state["fresh"], state["upgrade"]) == (False, False)
    assert state["at_pin"] == DRIVER_535_261
    assert state["other_version"] == []
    assert state["held"] == ["libcuda1", "nvidia-smi"]
    # nvidia-support and nvidia-installer-cleanup carry their own version series: never driver packages.
    assert "nvidia-support" not in state["at_pin"] + state["other_version"]


def test_new_pin_is_an_upgrade_of_every_driver_package():
    state = driver_state(CAPTURE, "535.309.01-0+deb12u1")
    assert state["upgrade"] is True
    assert state["installed_upstream"] == "535.261.03"
    assert state["at_pin"] == []
    assert state["other_version"] == DRIVER_535_261


def test_after_the_upgrade_everything_is_at_the_new_pin():
    upgraded = CAPTURE.replace("535.261.03-1\thi", "535.309.01-0+deb12u1\tii").replace(
        "535.261.03-1\tii", "535.309.01-0+deb12u1\tii")
    state = driver_state(upgraded, "535.309.01-0+deb12u1")
    assert (state["upgrade"], state["held"]) == (False, [])
    assert state["at_pin"] == DRIVER_535_261


def test_nothing_installed_is_fresh():
    state = driver_state("nvidia-smi\t\tun \nlibcuda1\t\tun \n", "535.261.03-1")
    assert (state["fresh"], state["upgrade"], state["at_pin"]) == (True, False, [])


def test_nvidia_repo_upstream_pin_matches_ubuntu_revisions():
    text = "nvidia-smi\t580.95.05-0ubuntu1\tii \nlibnvidia-compute-580\t580.95.05-0ubuntu1\thi \n"
    state = driver_state(text, "580.95.05")
    assert state["at_pin"] == ["libnvidia-compute-580", "nvidia-smi"] and not state["upgrade"]


@pytest.mark.parametrize("bad", ["nvidia-smi 535.261.03-1 ii", "a\tb\n"])
def test_malformed_output_is_refused(bad):
    with pytest.raises(DriverStateError):
        parse_dpkg_query(bad)


def test_empty_pin_is_refused():
    with pytest.raises(DriverStateError, match="versions.yaml"):
        driver_state(CAPTURE, "")


@pytest.mark.parametrize("dist,major,repo", [("Ubuntu", "22", "ubuntu2204"), ("Ubuntu", 24, "ubuntu2404"),
                                             ("Debian", "12", "debian12")])
def test_nvidia_repo_distro(dist, major, repo):
    assert nvidia_repo_distro(dist, major) == repo


def test_nvidia_repo_distro_refuses_unknown():
    with pytest.raises(DriverStateError, match="Debian 11"):
        nvidia_repo_distro("Debian", "11")


# The argv as dpkg-query(1) documents it; the backslash escapes are dpkg-query's own, not Python's.
@pytest.mark.parametrize("packages, argv", [
    ("nvidia-smi", ["dpkg-query", "-W", "-f=${Package}\\t${Version}\\t${db:Status-Abbrev}\\n", "nvidia-smi"]),
    (["nvidia-*", "libcuda*"],
     ["dpkg-query", "-W", "-f=${Package}\\t${Version}\\t${db:Status-Abbrev}\\n", "nvidia-*", "libcuda*"]),
])
def test_dpkg_query_argv(packages, argv):
    assert dpkg_query_argv(packages) == argv


@pytest.mark.parametrize("bad", [[], "", ["nvidia-*", ""], [None]])
def test_dpkg_query_argv_needs_names(bad):
    with pytest.raises(DriverStateError):
        dpkg_query_argv(bad)


@pytest.mark.parametrize("text, package, version", [
    (CAPTURE, "nvidia-smi", "535.261.03-1"),
    (CAPTURE, "libcuda-11.0-1", ""),                                 # "un": known, not installed
    ("nvidia-smi\t535.261.03-1\trc \n", "nvidia-smi", ""),           # removed, config files left
    ("libcuda1:amd64\t535.261.03-1\thi \n", "libcuda1", "535.261.03-1"),
    ("", "nvidia-smi", ""),                                          # dpkg-query: no packages found
])
def test_installed_version(text, package, version):
    assert installed_version(text, package) == version


@pytest.mark.skipif(not shutil.which("dpkg-query"), reason="dpkg-query is not installed (not a Debian system)")
def test_real_dpkg_query_output_parses():
    """The argv run for real: its output is what parse_dpkg_query reads, checked against dpkg-query's own
    one-field answer for the same package."""
    out = subprocess.run(dpkg_query_argv(["dpkg"]), capture_output=True, text=True, check=True).stdout
    own = subprocess.run(["dpkg-query", "-W", "-f=${Version}", "dpkg"], capture_output=True, text=True,
                         check=True).stdout
    assert parse_dpkg_query(out)["dpkg"]["installed"] is True
    assert installed_version(out, "dpkg") == own
