#!/usr/bin/env bash
# deploy/base-image.sh [docker|podman]   (`make base-image [ENGINE=...]`)
#
# The Dockerfile starts FROM debian:bookworm-slim. Where Docker Hub cannot be reached, this
# builds that image instead: a bookworm root filesystem made with debootstrap from this
# machine's Debian mirror, slimmed the way Debian's -slim images are, carrying this machine's
# CA certificates, imported into the engine under the same name. Without an argument the
# engine is docker when a Docker daemon answers, else podman.
#
# An image of that name already there is kept (whether pulled or built here);
# RAGD_REBUILD_BASE=1 builds and imports it again. Needs root (debootstrap; installs it from
# Debian if missing).
set -euo pipefail

engine=${1:-$(docker info >/dev/null 2>&1 && echo docker || echo podman)}
case $engine in
  docker | podman) ;;
  *)
    echo "usage: $0 [docker|podman]" >&2
    exit 2
    ;;
esac
# The fully qualified name: podman would otherwise look for localhost/debian:bookworm-slim;
# Docker reads it as plain debian:bookworm-slim.
BASE_IMAGE=docker.io/library/debian:bookworm-slim
SUITE=bookworm

if "$engine" image inspect "$BASE_IMAGE" >/dev/null 2>&1 && [[ -z ${RAGD_REBUILD_BASE:-} ]]; then
  echo "reusing $BASE_IMAGE ($("$engine" image inspect -f '{{.Created}}' "$BASE_IMAGE"))"
  exit 0
fi
if [[ $(id -u) != 0 ]]; then
  echo "base-image: debootstrap needs root (or load debian:bookworm-slim into $engine yourself)" >&2
  exit 1
fi
if ! command -v debootstrap >/dev/null; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap \
    >/dev/null
fi

# The first URI of this machine's apt sources that matches the pattern (deb822 or one-line).
apt_uri() {
  grep -rhoE "https?://[^ ]+/$1/?( |$)" /etc/apt/sources.list /etc/apt/sources.list.d/ \
    2>/dev/null | head -1 | tr -d ' ' || true
}

mirror=$(apt_uri debian)
mirror=${mirror:-http://deb.debian.org/debian}
security=$(apt_uri debian-security)
security=${security:-http://deb.debian.org/debian-security}
rootfs=$(mktemp -d /var/tmp/ragd-rootfs.XXXXXX)
# shellcheck disable=SC2064  # expand now: the trap must remove this directory.
trap "rm -rf '$rootfs'" EXIT

echo "debootstrap $SUITE from $mirror"
debootstrap --variant=minbase "$SUITE" "$rootfs" "$mirror" >/dev/null
cat >"$rootfs/etc/apt/sources.list" <<EOF
deb $mirror $SUITE main
deb $mirror $SUITE-updates main
deb $security $SUITE-security main
EOF
# What Debian's -slim images do: no docs, man pages or translations, no apt caches.
cat >"$rootfs/etc/dpkg/dpkg.cfg.d/slim" <<'EOF'
path-exclude /usr/share/doc/*
path-include /usr/share/doc/*/copyright
path-exclude /usr/share/man/*
path-exclude /usr/share/info/*
path-exclude /usr/share/locale/*
path-include /usr/share/locale/locale.alias
EOF
cat >"$rootfs/etc/apt/apt.conf.d/docker-clean" <<'EOF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/*.bin || true"; };
Dir::Cache::pkgcache ""; Dir::Cache::srcpkgcache "";
Acquire::Languages "none";
EOF
find "$rootfs/usr/share/doc" -mindepth 2 ! -name copyright -delete 2>/dev/null || true
rm -rf "$rootfs"/usr/share/{man,info}/* "$rootfs"/var/cache/apt/archives/*.deb \
  "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/log/*.log
# Downloads from inside a build may go through a TLS-intercepting proxy: the image trusts what
# the host trusts. ca-certificates, once a build installs it, folds the extra certificates
# into the bundle; pip is told to use that bundle instead of its own.
mkdir -p "$rootfs/usr/local/share/ca-certificates" "$rootfs/etc/ssl/certs"
cp /usr/local/share/ca-certificates/*.crt "$rootfs/usr/local/share/ca-certificates/" \
  2>/dev/null || true
cp /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/"
printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' >"$rootfs/etc/pip.conf"

echo "importing the root filesystem into $engine as $BASE_IMAGE"
tar -C "$rootfs" --numeric-owner -c . | "$engine" import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'CMD ["bash"]' \
  --change "LABEL io.ragd.base=debootstrap-$SUITE" \
  - "$BASE_IMAGE" >/dev/null
"$engine" image inspect -f "$BASE_IMAGE {{.Id}}, {{.Size}} bytes" "$BASE_IMAGE"
