# Sourced by the debootstrap scripts (node-image.sh, python-base.sh).

# debootstrap_image LABEL IMAGE PACKAGES: skip when IMAGE is built (unless FORCE=1), else debootstrap
# a Debian 12 minbase with PACKAGES into a temporary ROOT (removed on exit) with the node's sources.
debootstrap_image() {
  local label="$1" image="$2" packages="$3"
  MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
  if [[ "${FORCE:-0}" != 1 ]] && docker image inspect "$image" >/dev/null 2>&1; then
    echo "$label: $image already built (FORCE=1 to rebuild)"
    exit 0
  fi
  ROOT="$(mktemp -d "/var/tmp/vllm-deploy-${label// /-}.XXXXXX")"
  # shellcheck disable=SC2064  # expand now: ROOT is this call's directory
  trap "rm -rf '$ROOT'" EXIT
  echo "$label: debootstrap bookworm into $ROOT (about a minute)"
  debootstrap --variant=minbase --include="$packages" bookworm "$ROOT" "$MIRROR" >"$ROOT.log" 2>&1 \
    || { tail -20 "$ROOT.log"; exit 1; }
  rm -f "$ROOT.log"
  debian_sources "$ROOT" "$MIRROR"
}

# debian_sources ROOT MIRROR: the same package sources as a real Debian 12 node (main + updates +
# security), in deb822 form, replacing debootstrap's one-line sources.list.
debian_sources() {
  local root="$1" mirror="$2"
  cat >"$root/etc/apt/sources.list.d/debian.sources" <<SOURCES
Types: deb
URIs: $mirror
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: ${mirror%/debian}/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES
  rm -f "$root/etc/apt/sources.list"
}
