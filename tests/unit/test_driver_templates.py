"""The NVIDIA-repo code paths cannot be installed here (NVIDIA's repositories are unreachable), so
their apt files are rendered from the roles' own templates and checked as apt would read them."""

from __future__ import annotations

import re
from pathlib import Path

import jinja2
import pytest

from vllm_deploy.driver import nvidia_repo_distro, upstream_version

ROLES = Path(__file__).resolve().parents[2] / "roles"


def render(role, template, **context):
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(ROLES / role / "templates")),
                             undefined=jinja2.StrictUndefined, keep_trailing_newline=True)
    env.tests["match"] = lambda value, pattern: re.match(pattern, str(value)) is not None
    env.filters["comment"] = lambda text: "\n".join("# " + line for line in str(text).splitlines())
    return env.get_template(template).render(ansible_managed="Ansible managed", **context)


def stanzas(text):
    """deb822: blank-line separated stanzas of `Key: value` (comments dropped)."""
    out, current = [], {}
    for line in text.splitlines():
        if line.startswith("#"):
            continue
        if not line.strip():
            if current:
                out.append(current)
            current = {}
            continue
        key, _, value = line.partition(":")
        current[key.strip()] = value.strip()
    if current:
        out.append(current)
    return out


@pytest.mark.parametrize("dist,major,url", [
    ("Ubuntu", "22", "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64/"),
    ("Ubuntu", "24", "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/"),
    ("Debian", "12", "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/"),
])
def test_nvidia_cuda_source(dist, major, url):
    text = render("nvidia_driver", "nvidia-cuda.sources.j2",
                  nvidia_driver_repo_url="https://developer.download.nvidia.com/compute/cuda/repos",
                  __nvidia_driver_repo_distro=nvidia_repo_distro(dist, major),
                  nvidia_driver_repo_key="https://developer.download.nvidia.com/compute/cuda/repos/x/3bf863cc.pub")
    [stanza] = stanzas(text)
    assert stanza == {"Types": "deb", "URIs": url, "Suites": "/",
                      "Signed-By": "/etc/apt/keyrings/vllm-deploy-nvidia-cuda.asc"}


@pytest.mark.parametrize("source,pin,apt_version", [
    ("nvidia_repo", "580.95.05", "580.95.05-*"),
    ("debian", "535.261.03-1", "535.261.03-1"),
])
def test_apt_pin(source, pin, apt_version):
    text = render("nvidia_driver", "apt-preferences.j2", __nvidia_driver_pin=pin, nvidia_driver_source=source,
                  __nvidia_driver_apt_version=apt_version)
    [stanza] = stanzas(text)
    assert stanza["Pin"] == f"version {apt_version}"
    assert int(stanza["Pin-Priority"]) > 1000          # > 1000: apt also downgrades to the pin (restore)
    for package in ("nvidia-*", "libnvidia-*", "libcuda*", "cuda-drivers*"):
        assert package in stanza["Package"].split()
    assert upstream_version(pin) in text


def test_container_toolkit_source():
    text = render("nvidia_container_toolkit", "nvidia-container-toolkit.sources.j2",
                  nvidia_container_toolkit_repo_url="https://nvidia.github.io/libnvidia-container/stable/deb",
                  nvidia_container_toolkit_repo_key="/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg")
    [stanza] = stanzas(text)
    assert stanza["URIs"] == "https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH)"
    assert stanza["Signed-By"] == "/usr/share/keyrings/nvidia-container-toolkit-keyring.gpg"


def test_debian_nonfree_sources():
    text = render("nvidia_driver", "debian-nonfree.sources.j2", nvidia_driver_debian_mirror="http://deb.debian.org/debian",
                  nvidia_driver_debian_security_mirror="http://deb.debian.org/debian-security",
                  nvidia_driver_debian_components=["contrib", "non-free", "non-free-firmware"],
                  ansible_facts={"distribution_release": "bookworm"})
    main, security = stanzas(text)
    assert main["Suites"] == "bookworm bookworm-updates" and security["Suites"] == "bookworm-security"
    assert main["Components"] == security["Components"] == "contrib non-free non-free-firmware"
