# Sourced by the debootstrap scripts (node-image.sh, python-base.sh).
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
