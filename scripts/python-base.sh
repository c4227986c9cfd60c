#!/usr/bin/env bash
# Build a local stand-in for the image role's default runtime base (python:3.11-slim-bookworm, which
# no registry here serves): Debian 12 minbase + CPython 3.11 with its headers (python:*-slim carries
# Python.h too), brought up to date from bookworm-updates/-security, no systemd. `make bench-image`
# measures the slim image on it. Cached by tag; FORCE=1 rebuilds.
set -euo pipefail
# shellcheck source=scripts/debian-sources.sh
source "$(dirname "$0")/debian-sources.sh"

IMAGE="${PYTHON_BASE_IMAGE:-vllm-deploy/python-base:bookworm}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"

if [[ "${FORCE:-0}" != 1 ]] && docker image inspect "$IMAGE" >/dev/null 2>&1; then
  echo "python base: $IMAGE already built (FORCE=1 to rebuild)"
  exit 0
fi

root="$(mktemp -d /var/tmp/vllm-deploy-pybase.XXXXXX)"
trap 'rm -rf "$root"' EXIT
echo "python base: debootstrap bookworm into $root (about a minute)"
debootstrap --variant=minbase --include=python3,python3-venv,libpython3-dev,ca-certificates \
  bookworm "$root" "$MIRROR" >"$root.log" 2>&1 || { tail -20 "$root.log"; exit 1; }
rm -f "$root.log"
debian_sources "$root" "$MIRROR"
# Up to date, as a published base is: later apt installs then add packages, not upgrades.
chroot "$root" sh -c 'apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get -y -qq upgrade' >/dev/null
chroot "$root" apt-get clean
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/usr/share/doc/* "$root"/usr/share/man/*

tar -C "$root" -c . | docker import -c 'CMD ["python3"]' - "$IMAGE" >/dev/null
echo "python base: built $IMAGE ($(docker image inspect -f '{{.Size}}' "$IMAGE" | numfmt --to=iec))"
