#!/usr/bin/env bash
# PgBouncer in transaction pooling mode in front of the private PostgreSQL of
# scripts/db.sh, for the tests that run the product through a pooler.
#
#   scripts/pgbouncer.sh start   start it (and the database behind it, if needed)
#   scripts/pgbouncer.sh url     print its URL, starting it if needed
#   scripts/pgbouncer.sh stop    stop it (if this script started one)
#
# The database is the one `scripts/db.sh url` prints (DATABASE_URL when set;
# else the private cluster on BC_PG_PORT). PgBouncer listens on
# 127.0.0.1:${BC_PGBOUNCER_PORT:-64329}; every database name routes to the same
# name on that server (the tests' bc_test_* databases too), with trust
# authentication, as the private cluster has. The pool is small and handed out
# round robin, so that a statement that leaves its transaction meets another
# server. Its ini, log and pid live under .data/pgbouncer. PgBouncer refuses to
# run as root: as root it runs as the `postgres` system user.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dir="$root/.data/pgbouncer"
port="${BC_PGBOUNCER_PORT:-64329}"

log() { printf 'pgbouncer: %s\n' "$*" >&2; }

find_bin() {
  if command -v pgbouncer >/dev/null 2>&1; then command -v pgbouncer; return 0; fi
  if [ -x /usr/sbin/pgbouncer ]; then echo /usr/sbin/pgbouncer; return 0; fi
  return 1
}

ensure_binary() {
  if find_bin >/dev/null; then return 0; fi
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
    log "pgbouncer not found; installing it with apt-get"
    DEBIAN_FRONTEND=noninteractive apt-get update -qq >&2
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq pgbouncer >&2
    find_bin >/dev/null && return 0
  fi
  log "pgbouncer not found. Install it (Debian/Ubuntu: apt-get install pgbouncer)."
  exit 1
}

# Runs a command as PgBouncer's owner: `postgres` when we are root, else ourselves.
as_owner() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

is_running() {
  [ -f "$dir/pgbouncer.pid" ] && kill -0 "$(cat "$dir/pgbouncer.pid")" 2>/dev/null
}

# host and port of the server behind, from its URL (postgres://user@host:port/db).
server_host_port() {
  local url="$1" rest hostport
  rest="${url#*://}"; rest="${rest#*@}"; hostport="${rest%%/*}"; hostport="${hostport%%\?*}"
  case "$hostport" in
    *:*) echo "${hostport%%:*} ${hostport##*:}" ;;
    *) echo "$hostport 5432" ;;
  esac
}

url_user() {
  local rest="${1#*://}"
  case "$rest" in
    *@*) rest="${rest%%@*}"; echo "${rest%%:*}" ;;
    *) echo postgres ;;
  esac
}

start() {
  ensure_binary
  if is_running; then return 0; fi
  local server host pgport user
  server="$("$root/scripts/db.sh" url)"
  read -r host pgport <<<"$(server_host_port "$server")"
  user="$(url_user "$server")"
  mkdir -p "$dir"
  if [ "$(id -u)" = 0 ]; then
    id postgres >/dev/null 2>&1 || useradd --system --home-dir /var/lib/postgresql --shell /bin/bash postgres
    local p="$root/.data"
    while [ "$p" != "/" ]; do chmod o+x "$p" 2>/dev/null || true; p="$(dirname "$p")"; done
  fi
  printf '"%s" ""\n' "$user" >"$dir/userlist.txt"
  cat >"$dir/pgbouncer.ini" <<EOF
[databases]
* = host=$host port=$pgport

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = $port
unix_socket_dir =
auth_type = trust
auth_file = $dir/userlist.txt
pool_mode = transaction
max_client_conn = 2000
default_pool_size = 4
min_pool_size = 4
reserve_pool_size = 0
max_db_connections = 8
server_round_robin = 1
autodb_idle_timeout = 10
server_reset_query =
ignore_startup_parameters = extra_float_digits,options
logfile = $dir/pgbouncer.log
pidfile = $dir/pgbouncer.pid
admin_users = $user
EOF
  [ "$(id -u)" = 0 ] && chown -R postgres:postgres "$dir"
  log "starting PgBouncer (transaction pooling) on 127.0.0.1:$port in front of $host:$pgport"
  as_owner "$(find_bin)" -d "$dir/pgbouncer.ini" >&2 \
    || { tail -n 30 "$dir/pgbouncer.log" >&2 2>/dev/null; exit 1; }
  local i
  for i in $(seq 1 50); do
    if is_running && (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then return 0; fi
    sleep 0.1
  done
  log "PgBouncer did not start"; tail -n 30 "$dir/pgbouncer.log" >&2 2>/dev/null; exit 1
}

case "${1:-url}" in
  url)
    start
    server="$("$root/scripts/db.sh" url)"
    echo "postgres://$(url_user "$server")@127.0.0.1:${port}/postgres"
    ;;
  start)
    start
    ;;
  stop)
    if is_running; then
      kill -INT "$(cat "$dir/pgbouncer.pid")"
      for _ in $(seq 1 50); do is_running || break; sleep 0.1; done
    else
      log "no PgBouncer is running"
    fi
    ;;
  *)
    echo "usage: $0 [url|start|stop]" >&2; exit 2 ;;
esac
