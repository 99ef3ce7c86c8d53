#!/usr/bin/env bash
# `make compose-test`: runs docker-compose.yml for real, with podman and podman-compose, on a
# machine that has neither Docker nor a reachable image registry.
#
#  1. installs podman, podman-compose and their helpers from Debian if missing (needs root);
#  2. builds a Debian bookworm root filesystem with debootstrap from this machine's Debian
#     mirror and imports it as debian:bookworm-slim, the name the Dockerfile starts FROM;
#  3. builds the three images, starts the stack with an API key, waits for every healthcheck,
#     runs deploy/compose_flow.py against the published gateway port, checks that embedding
#     calls are spread over both embedder replicas, crashes one replica (its restart policy
#     brings it back) and stops the other, running the flow each time, restarts the store and
#     searches what it stored before, and takes the README's backup;
#  4. tears down the containers, the project's volume and network.
#
# Kept between runs, so that the next run takes two minutes instead of many: the base image
# and the ragd-* images with their build cache (layers); also the packages and
# /etc/containers/containers.conf of step 1. RAGD_COMPOSE_TEST_PURGE=1 removes the images too.
# RAGD_COMPOSE_TEST_KEEP=1 leaves the stack running for a look (then `podman-compose -p
# ragd-compose-test down -v`).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

PROJECT=${RAGD_COMPOSE_PROJECT:-ragd-compose-test}
BASE_IMAGE=docker.io/library/debian:bookworm-slim
SUITE=bookworm
IMAGES=(ragd-embedder:0.1.0 ragd-store:0.1.0 ragd-gateway:0.1.0)
API_KEY=compose-test-key
# The Dockerfile's HEALTHCHECK survives only in Docker-format images (OCI has no such field).
export BUILDAH_FORMAT=docker
# podman schedules healthchecks with systemd timers; without systemd it would log an error per
# container. This script runs the checks itself (wait_healthy).
export DISABLE_HC_SYSTEMD=true

started=$(date +%s)
last=$started
timings=()

say() { printf '\n== %s\n' "$*"; }
phase_done() {
  local now
  now=$(date +%s)
  timings+=("$(printf '%-34s %4ds' "$1" $((now - last)))")
  last=$now
}

compose() { podman-compose -p "$PROJECT" "$@"; }

# Set once the stack is up.
embedders=()
store=""
gateway=""
flow=()

# --- 1. podman and its helpers ---------------------------------------------------------------
install_podman() {
  local missing=() pkg
  # runc: crun fails on hybrid cgroups; netavark + aardvark-dns: service-name DNS; iptables:
  # published ports; debootstrap: the base image.
  for pkg in podman podman-compose netavark aardvark-dns runc iptables debootstrap; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' \
      || missing+=("$pkg")
  done
  if ((${#missing[@]})); then
    if [[ $(id -u) != 0 ]]; then
      echo "compose-test: needs root to install ${missing[*]} (or install them first)" >&2
      exit 1
    fi
    say "installing ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" \
      >/dev/null
  fi
  if [[ ! -e /etc/containers/containers.conf ]]; then
    install -D -m 0644 deploy/podman/containers.conf /etc/containers/containers.conf
  elif ! grep -q '^runtime *= *"runc"' /etc/containers/containers.conf; then
    echo "compose-test: /etc/containers/containers.conf exists and was left alone; if podman" \
      "fails, compare it with deploy/podman/containers.conf" >&2
  fi
  podman --version
  podman-compose version 2>/dev/null | sed -n 's/^podman-composer* version */podman-compose /p'
}

# --- 2. the base image -------------------------------------------------------------------------
# The first URI of this machine's apt sources that matches the pattern (deb822 or one-line).
apt_uri() {
  grep -rhoE "https?://[^ ]+/$1/?( |$)" /etc/apt/sources.list /etc/apt/sources.list.d/ \
    2>/dev/null | head -1 | tr -d ' ' || true
}

build_base_image() {
  if podman image exists "$BASE_IMAGE" && [[ -z ${RAGD_REBUILD_BASE:-} ]]; then
    echo "reusing $BASE_IMAGE ($(podman image inspect -f '{{.Created}}' "$BASE_IMAGE"))"
    return
  fi
  local mirror security rootfs
  mirror=$(apt_uri debian)
  mirror=${mirror:-http://deb.debian.org/debian}
  security=$(apt_uri debian-security)
  security=${security:-http://deb.debian.org/debian-security}
  rootfs=$(mktemp -d /var/tmp/ragd-rootfs.XXXXXX)
  # shellcheck disable=SC2064  # expand now: the trap must remove this directory.
  trap "rm -rf '$rootfs'" RETURN
  say "debootstrap $SUITE from $mirror"
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
  # Downloads from inside a build go through this machine's TLS-intercepting proxy: the image
  # trusts what the host trusts. ca-certificates, once a build installs it, folds the extra
  # certificates into the bundle; pip is told to use that bundle instead of its own.
  mkdir -p "$rootfs/usr/local/share/ca-certificates" "$rootfs/etc/ssl/certs"
  cp /usr/local/share/ca-certificates/*.crt "$rootfs/usr/local/share/ca-certificates/" \
    2>/dev/null || true
  cp /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/"
  printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' >"$rootfs/etc/pip.conf"
  say "importing the root filesystem as $BASE_IMAGE"
  tar -C "$rootfs" --numeric-owner -c . | podman import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'CMD ["bash"]' \
    --change "LABEL io.ragd.base=debootstrap-$SUITE" \
    - "$BASE_IMAGE" >/dev/null
  podman image ls "$BASE_IMAGE"
}

# --- 3. the stack ---------------------------------------------------------------------------------
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

project_containers() {
  podman ps -a --filter "label=io.podman.compose.project=$PROJECT" --format '{{.Names}}' | sort
}

# Runs each container's own healthcheck (podman has no systemd timers here to run them) until
# all of the named containers are healthy.
wait_healthy() {
  local deadline=$(($(date +%s) + $1)) pending name
  shift
  while :; do
    pending=()
    for name in "$@"; do
      podman healthcheck run "$name" >/dev/null 2>&1 || pending+=("$name")
    done
    ((${#pending[@]} == 0)) && return 0
    if (($(date +%s) > deadline)); then
      echo "compose-test: not healthy in time: ${pending[*]}" >&2
      return 1
    fi
    sleep 2
  done
}

# The README's backup: SQLite's online backup API inside the running store; the copy is taken
# out and checked with the host's sqlite3.
backup_database() {
  local copy status=0
  copy=$(mktemp -d /var/tmp/ragd-backup.XXXXXX)
  podman exec -i "$store" python - <<'PY'
import apsw
source, copy = apsw.Connection("/data/ragd.db"), apsw.Connection("/data/backup.db")
with copy.backup("main", source, "main") as backup:
    backup.step(-1)
PY
  podman cp "$store:/data/backup.db" "$copy/backup.db"
  podman exec "$store" rm /data/backup.db
  python3 - "$copy/backup.db" <<'PY' || status=$?
import sqlite3
import sys

db = sqlite3.connect(sys.argv[1])
check = db.execute("PRAGMA integrity_check").fetchone()[0]
stores = db.execute("SELECT count(*) FROM collections").fetchone()[0]
print(f"backup: integrity {check}, {stores} vector stores")
sys.exit(0 if check == "ok" and stores >= 2 else 1)
PY
  rm -rf "$copy"
  return $status
}

cpu_ticks() { podman exec "$1" cat /proc/1/stat | awk '{print $14 + $15}'; }

# Bursts of embedding requests through the gateway until every embedder replica has done a
# fair part of the work (CPU time of its process): the gateway found all of them through the one
# service name and balances over them. $1: seconds to wait for that. A replica that comes back
# gets calls again once the gateway resolves the name again, which it does when a connection
# ends (RAGD_EMBEDDER_MAX_CONNECTION_AGE), at most every 30 s.
check_spread() {
  local deadline=$(($(date +%s) + $1)) started=$SECONDS before=() delta=() total i fair report
  while :; do
    for i in "${!embedders[@]}"; do before[i]=$(cpu_ticks "${embedders[i]}"); done
    "${flow[@]}" burst 16
    total=0
    for i in "${!embedders[@]}"; do
      delta[i]=$(($(cpu_ticks "${embedders[i]}") - before[i]))
      total=$((total + delta[i]))
    done
    fair=1
    report=()
    for i in "${!embedders[@]}"; do
      report+=("${embedders[i]}: ${delta[i]} CPU ticks ($((100 * delta[i] / (total > 0 ? total : 1)))%)")
      ((delta[i] * 100 >= total * 60 / ${#embedders[@]})) || fair=0
    done
    printf '%s\n' "${report[@]}"
    if ((fair)); then
      echo "every replica did at least 60% of its share ($((SECONDS - started)) s)"
      return 0
    fi
    if (($(date +%s) > deadline)); then
      echo "compose-test: calls are not spread over the replicas" >&2
      return 1
    fi
    sleep 5
  done
}

teardown() {
  local status=$?
  if ((status != 0)); then
    for name in $(project_containers); do
      say "logs of $name (last 30 lines)"
      podman logs --tail 30 "$name" 2>&1 || true
    done
  fi
  if [[ -n ${RAGD_COMPOSE_TEST_KEEP:-} ]]; then
    say "left running (RAGD_COMPOSE_TEST_KEEP): podman-compose -p $PROJECT down -v"
    return
  fi
  say "tearing down $PROJECT"
  compose down -v >/dev/null 2>&1 || true
  # podman-compose 1.0 does not remove the network it created.
  podman network rm -f "${PROJECT}_default" >/dev/null 2>&1 || true
  if [[ -n ${RAGD_COMPOSE_TEST_PURGE:-} ]]; then
    podman rmi -f "${IMAGES[@]}" "$BASE_IMAGE" >/dev/null 2>&1 || true
    podman image prune -f >/dev/null 2>&1 || true
  fi
  echo "left: $(project_containers | wc -l) containers," \
    "$(podman volume ls -q --filter "label=io.podman.compose.project=$PROJECT" | wc -l) volumes," \
    "$(podman network ls -q --filter "name=^${PROJECT}_" | wc -l) networks of $PROJECT"
  return $status
}

main() {
  say "podman"
  install_podman
  phase_done "install podman (if missing)"

  build_base_image
  phase_done "base image"

  # Leftovers of an interrupted run would collide with this one.
  compose down -v >/dev/null 2>&1 || true
  podman network rm -f "${PROJECT}_default" >/dev/null 2>&1 || true
  trap teardown EXIT

  say "building ${IMAGES[*]}"
  # One build per service (podman-compose 1.0 would otherwise build once per replica).
  compose build embedder store gateway
  podman image ls --filter reference='ragd-*' --format '{{.Repository}}:{{.Tag}} {{.Size}}'
  phase_done "build images"

  RAGD_PORT=$(free_port)
  RAGD_INGEST_PORT=$(free_port)
  # A short connection age: a replica that comes back gets calls again within seconds.
  export RAGD_PORT RAGD_INGEST_PORT RAGD_API_KEYS=$API_KEY RAGD_EMBEDDER_REPLICAS=2 \
    RAGD_EMBEDDER_MAX_CONNECTION_AGE=15
  say "up: gateway on 127.0.0.1:$RAGD_PORT"
  compose up -d
  mapfile -t embedders < <(project_containers | grep '_embedder_')
  store=$(project_containers | grep '_store_')
  gateway=$(project_containers | grep '_gateway_')
  wait_healthy 180 "$store" "${embedders[@]}"
  wait_healthy 120 "$gateway"
  podman ps --filter "label=io.podman.compose.project=$PROJECT" \
    --format '{{.Names}}  {{.Status}}  {{.Ports}}'
  phase_done "up and healthy"

  flow=(python3 deploy/compose_flow.py --url "http://127.0.0.1:$RAGD_PORT" --api-key "$API_KEY")
  say "flow with ${#embedders[@]} embedder replicas"
  local out store_id
  out=$("${flow[@]}" flow) || { printf '%s\n' "$out"; return 1; }
  printf '%s\n' "$out"
  store_id=${out##*$'\n'}
  say "spread over the replicas"
  check_spread 0
  phase_done "flow"

  # A crash, not `podman kill` (which podman counts as a user's stop, exempt from restarts).
  say "SIGKILL to ${embedders[0]}'s process; the flow again"
  kill -KILL "$(podman inspect -f '{{.State.Pid}}' "${embedders[0]}")"
  "${flow[@]}" flow >/dev/null
  echo "flow passed"
  wait_healthy 120 "${embedders[0]}"
  echo "${embedders[0]} restarted by its policy:" \
    "$(podman inspect -f '{{.RestartCount}}' "${embedders[0]}") restart(s)"

  say "stopping ${embedders[1]}; the flow on one replica"
  podman stop "${embedders[1]}" >/dev/null
  "${flow[@]}" flow >/dev/null
  echo "flow passed"
  podman start "${embedders[1]}" >/dev/null
  wait_healthy 120 "${embedders[1]}"
  echo "${embedders[1]} started again; both must get their share again"
  check_spread 90
  phase_done "flow without one replica"

  say "restarting $store; searching what it stored before"
  podman restart "$store" >/dev/null
  wait_healthy 120 "$store"
  # The store comes back on a new address; the gateway finds it once the name resolves to it
  # (podman's aardvark-dns may fail to answer for tens of seconds after a restart).
  local waited=$SECONDS
  wait_healthy 120 "$gateway"
  echo "gateway ready again $((SECONDS - waited)) s after the store"
  "${flow[@]}" search "$store_id"
  phase_done "store restart keeps data"

  say "backup (README, Backups)"
  backup_database
  phase_done "backup"
}

main
trap - EXIT
teardown
phase_done "teardown"
say "timings"
printf '%s\n' "${timings[@]}"
printf '%-34s %4ds\n' "total" $(($(date +%s) - started))
