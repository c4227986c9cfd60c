#!/usr/bin/env bash
# Build the local base image every staging and test node boots from: a minimal Debian 12 with systemd
# as PID 1, made with debootstrap (no registry is needed or reachable). Cached by tag; FORCE=1 rebuilds.
set -euo pipefail
# shellcheck source=scripts/debian-sources.sh
source "$(dirname "$0")/debian-sources.sh"

IMAGE="${NODE_IMAGE:-vllm-deploy/node:bookworm}"
debootstrap_image "node image" "$IMAGE" python3,python3-apt,systemd,systemd-sysv,dbus,ca-certificates,sudo,iproute2,procps
root="$ROOT"
# A container has no console or udev to wait for; keep boot quiet and fast.
for unit in getty@tty1.service systemd-udevd.service systemd-udev-trigger.service \
            systemd-resolved.service systemd-timesyncd.service apt-daily.timer apt-daily-upgrade.timer; do
  ln -sf /dev/null "$root/etc/systemd/system/$unit"
done
echo "node" >"$root/etc/hostname"
: >"$root/etc/machine-id"
apt-get clean -o Dir="$root" >/dev/null 2>&1 || true
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/archives/*.deb
# Empty package lists must look stale, or apt's cache_valid_time would skip the first update.
touch -d 2000-01-01 "$root/var/lib/apt/lists"

tar -C "$root" -c . | docker import \
  -c 'CMD ["/lib/systemd/systemd"]' -c 'ENV container=docker' \
  - "$IMAGE" >/dev/null
echo "node image: built $IMAGE ($(docker image inspect -f '{{.Size}}' "$IMAGE" | numfmt --to=iec))"
