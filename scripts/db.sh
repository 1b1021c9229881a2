#!/usr/bin/env bash
# Local PostgreSQL for development, tests and CI.
#
#   scripts/db.sh url     print a DATABASE_URL, starting a private cluster if needed
#   scripts/db.sh stop    stop the private cluster (if this script started one)
#
# DATABASE_URL, when set, always wins: `url` prints it unchanged and starts nothing.
# Otherwise a private cluster lives under .data/pg (data) and .data/pg-run (socket,
# log), listening on 127.0.0.1 with trust authentication on loopback. PostgreSQL
# refuses to run as root, so as root the server runs as the `postgres` system user
# on a directory that user owns. A second `url` reuses it.
#
# Its port: BC_PG_PORT when set; else the one it used last (.data/pg-run/port)
# if that is still free, else 54329 if free, else the next free port above it
# (another checkout's cluster may hold 54329). The port chosen is remembered in
# .data/pg-run/port, and `url` always prints the port the running cluster
# listens on (read from its postmaster.pid), so two `url`s print the same URL.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
data="$root/.data/pg"
run="$root/.data/pg-run"
default_port=54329

url_of() { echo "postgres://postgres@127.0.0.1:$1/postgres"; }

log() { printf 'db: %s\n' "$*" >&2; }

find_bin() {
  local name="$1"
  if command -v "$name" >/dev/null 2>&1; then command -v "$name"; return 0; fi
  local d
  for d in /usr/lib/postgresql/*/bin; do
    if [ -x "$d/$name" ]; then echo "$d/$name"; return 0; fi
  done
  return 1
}

ensure_binaries() {
  if find_bin initdb >/dev/null && find_bin pg_ctl >/dev/null; then return 0; fi
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    log "PostgreSQL server binaries not found; installing them with apt-get"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq postgresql >&2
    find_bin initdb >/dev/null && return 0
  fi
  log "PostgreSQL server binaries (initdb, pg_ctl) not found."
  log "Install them (Debian/Ubuntu: apt-get install postgresql) or set DATABASE_URL."
  exit 1
}

# Runs a command as the cluster's owner: `postgres` when we are root, else ourselves.
as_owner() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

is_running() {
  [ -f "$data/postmaster.pid" ] && as_owner "$(find_bin pg_ctl)" -D "$data" status >/dev/null 2>&1
}

# The port the running cluster listens on: line 4 of its postmaster.pid.
running_port() {
  sed -n 4p "$data/postmaster.pid"
}

# Whether something accepts connections on 127.0.0.1:$1.
port_taken() {
  (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null
}

# The ports to try, best first: BC_PG_PORT alone when set; else the
# remembered port, then 54329 and the 99 ports above it.
candidate_ports() {
  if [ -n "${BC_PG_PORT:-}" ]; then echo "$BC_PG_PORT"; return; fi
  if [ -f "$run/port" ]; then cat "$run/port"; fi
  seq "$default_port" $((default_port + 99))
}

start() {
  ensure_binaries
  local initdb pg_ctl
  initdb="$(find_bin initdb)"; pg_ctl="$(find_bin pg_ctl)"
  mkdir -p "$root/.data"
  if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || useradd --system --home-dir /var/lib/postgresql --shell /bin/bash postgres
    # The postgres user must be able to reach the data directory.
    local p="$root/.data"
    while [ "$p" != "/" ]; do chmod o+x "$p" 2>/dev/null || true; p="$(dirname "$p")"; done
  fi
  if [ ! -f "$data/PG_VERSION" ]; then
    log "initialising a private cluster in $data"
    mkdir -p "$data" "$run"
    [ "$(id -u)" = 0 ] && chown postgres:postgres "$data" "$run"
    chmod 700 "$data"
    as_owner "$initdb" -D "$data" -U postgres --auth=trust --encoding=UTF8 --locale=C >"$run/initdb.log" 2>&1 \
      || { cat "$run/initdb.log" >&2; exit 1; }
  fi
  mkdir -p "$run"; [ "$(id -u)" = 0 ] && chown postgres:postgres "$run"
  if is_running; then return 0; fi
  local port
  for port in $(candidate_ports); do
    if port_taken "$port"; then
      if [ -n "${BC_PG_PORT:-}" ]; then
        log "port $port (BC_PG_PORT) is taken by another server"; exit 1
      fi
      continue
    fi
    log "starting PostgreSQL on 127.0.0.1:$port"
    if as_owner "$pg_ctl" -D "$data" -l "$run/postgres.log" -w -t 60 \
      -o "-p $port -k $run -c listen_addresses=127.0.0.1 -c max_connections=400 -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c shared_buffers=256MB" \
      start >&2; then
      echo "$port" >"$run/port"
      return 0
    fi
    # Another process may have taken the port since the check: try the next.
    if [ -z "${BC_PG_PORT:-}" ] && tail -n 5 "$run/postgres.log" | grep -q "could not bind"; then
      continue
    fi
    tail -n 30 "$run/postgres.log" >&2; exit 1
  done
  log "no free port for PostgreSQL from $default_port to $((default_port + 99)); set BC_PG_PORT"
  exit 1
}

case "${1:-url}" in
  url)
    if [ -n "${DATABASE_URL:-}" ]; then echo "$DATABASE_URL"; exit 0; fi
    start
    port="$(running_port)"
    if [ -n "${BC_PG_PORT:-}" ] && [ "$port" != "$BC_PG_PORT" ]; then
      log "the cluster already runs on port $port, not BC_PG_PORT=$BC_PG_PORT (db.sh stop first to move it)"
    fi
    url_of "$port"
    ;;
  start)
    start
    ;;
  stop)
    if [ -f "$data/PG_VERSION" ] && is_running; then
      as_owner "$(find_bin pg_ctl)" -D "$data" -m fast -w stop >&2
    else
      log "no private cluster is running"
    fi
    ;;
  *)
    echo "usage: $0 [url|start|stop]" >&2; exit 2 ;;
esac
