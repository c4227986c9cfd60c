#!/usr/bin/env bash
# Build a local stand-in for the image role's default runtime base (python:3.11-slim-bookworm, which
# no registry here serves): Debian 12 minbase + CPython 3.11 with its headers (python:*-slim carries
# Python.h too), brought up to date from bookworm-updates/-security, no systemd. `make bench-image`
# measures the slim image on it. Cached by tag; FORCE=1 rebuilds.
set -euo pipefail
# shellcheck source=scripts/debian-sources.sh
source "$(dirname "$0")/debian-sources.sh"

IMAGE="${PYTHON_BASE_IMAGE:-vllm-deploy/python-base:bookworm}"
debootstrap_image "python base" "$IMAGE" python3,python3-venv,libpython3-dev,ca-certificates
root="$ROOT"
# Up to date, as a published base is: later apt installs then add packages, not upgrades.
chroot "$root" sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get -y -qq upgrade' >/dev/null
chroot "$root" apt-get clean
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/usr/share/doc/* "$root"/usr/share/man/*

tar -C "$root" -c . | docker import -c 'CMD ["python3"]' - "$IMAGE" >/dev/null
echo "python base: built $IMAGE ($(docker image inspect -f '{{.Size}}' "$IMAGE" | numfmt --to=iec))"
