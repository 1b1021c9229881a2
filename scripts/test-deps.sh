#!/usr/bin/env bash
# What `just test` needs besides Rust: checks every outside tool the test suite
# runs, and installs the missing ones with Debian's apt-get when run as root.
# Run as another user, it stops at once (exit 1) with the exact command to run,
# before anything is built.
#
#   scripts/test-deps.sh           check, install what is missing (as root)
#   scripts/test-deps.sh --check   check only; exit 1 when something is missing
#
# The tools, and the tests that use them:
# - Chromium and a font for its screenshots: the console's browser tests
#   (bins/api-server/tests/it/system/console.rs; `CHROMIUM` names another one);
# - promtool (Debian's prometheus): `promtool check metrics` in the metrics tests;
# - Python's prometheus_client in Debian's python3: the metrics tests parse both
#   expositions with its OpenMetrics parser (system/metrics.rs);
# - openssl: the Google authentication tests make RSA keys with it;
# - PostgreSQL's server binaries (initdb, pg_ctl): the private cluster of
#   scripts/db.sh and the TLS tests' own cluster (system/db_tls.rs).
#
# For its own test (system::test_deps), paths under / are read under
# TEST_DEPS_SYSROOT and the user id is TEST_DEPS_UID when they are set.
set -euo pipefail

sysroot="${TEST_DEPS_SYSROOT:-}"
uid="${TEST_DEPS_UID:-$(id -u)}"
check_only=0
case "${1:-}" in
  --check) check_only=1 ;;
  "") ;;
  *) echo "usage: scripts/test-deps.sh [--check]" >&2; exit 2 ;;
esac

log() { printf 'test-deps: %s\n' "$*" >&2; }

has_chromium() {
  if [ -n "${CHROMIUM:-}" ]; then [ -x "$CHROMIUM" ]; return; fi
  [ -x "$sysroot/usr/bin/chromium" ] || [ -x "$sysroot/usr/bin/chromium-browser" ]
}
has_font() { [ -f "$sysroot/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf" ]; }
has_promtool() { command -v promtool >/dev/null 2>&1; }
# The metrics tests prefer Debian's python3 (where the package installs) to a
# python3 a version manager puts first on PATH.
python() {
  if [ -x "$sysroot/usr/bin/python3" ]; then echo "$sysroot/usr/bin/python3"; else echo python3; fi
}
has_prometheus_client() { "$(python)" -c 'import prometheus_client' >/dev/null 2>&1; }
has_openssl() { command -v openssl >/dev/null 2>&1; }
has_postgres() {
  local d
  for d in "$sysroot"/usr/lib/postgresql/*/bin; do
    if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then return 0; fi
  done
  command -v initdb >/dev/null 2>&1 && command -v pg_ctl >/dev/null 2>&1
}

# check name, what it is for, Debian packages
checks=(
  "has_chromium|Chromium (the console's browser tests)|chromium"
  "has_font|a font for Chromium's screenshots|fonts-dejavu-core"
  "has_promtool|promtool (the metrics tests)|prometheus"
  "has_prometheus_client|Python's prometheus_client (the metrics tests)|python3 python3-prometheus-client"
  "has_openssl|openssl (the Google authentication tests)|openssl"
  "has_postgres|PostgreSQL's server binaries (the test databases)|postgresql"
)

# Sets `packages` to the Debian packages of every missing tool, and names each
# missing tool on stderr. Builtins only, so that its test can stub every lookup.
find_missing() {
  local entry check what pkgs
  packages=()
  for entry in "${checks[@]}"; do
    IFS='|' read -r check what pkgs <<<"$entry"
    if ! "$check"; then
      log "missing: $what"
      read -r -a more <<<"$pkgs"
      packages+=("${more[@]}")
    fi
  done
}

find_missing
if [ "${#packages[@]}" = 0 ]; then
  exit 0
fi
# --no-install-recommends: prometheus would otherwise bring node-exporter,
# smartmontools and more.
install=(apt-get install -y -qq --no-install-recommends "${packages[@]}")
if [ "$check_only" = 1 ]; then
  log "to install them: ${install[*]}"
  exit 1
fi
if [ "$uid" != 0 ]; then
  log "the tests need these Debian packages; install them as root, then run just test again:"
  log "  sudo apt-get update && sudo ${install[*]}"
  exit 1
fi
if ! command -v apt-get >/dev/null 2>&1; then
  log "no apt-get here: install the tools above (Debian's packages: ${packages[*]}), then run again"
  exit 1
fi
wanted=("${packages[@]}")
log "installing with apt-get (a first time takes a minute or two): ${wanted[*]}"
# apt-get's progress goes to a log, shown only when it fails.
apt_log="$(mktemp)"
trap 'rm -f "$apt_log"' EXIT
if ! { DEBIAN_FRONTEND=noninteractive apt-get update -qq \
  && DEBIAN_FRONTEND=noninteractive "${install[@]}"; } >"$apt_log" 2>&1; then
  cat "$apt_log" >&2
  log "apt-get failed (above)"
  exit 1
fi
find_missing
if [ "${#packages[@]}" != 0 ]; then
  log "still missing after apt-get: ${packages[*]}"
  exit 1
fi
log "installed: ${wanted[*]}"
