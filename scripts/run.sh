#!/usr/bin/env bash
# `just run`: PostgreSQL (private unless DATABASE_URL is set), then fake-gce,
# api-server and reconciler-worker in the foreground. Ctrl-C stops them all.
# fake-gce keeps its world in .data/fake-gce.json (BC_FAKE_GCE_STATE), so a
# second `just run` brings back the world the first one built; `just reset`
# starts over.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

private_db=0
if [ -z "${DATABASE_URL:-}" ]; then
  private_db=1
  server="$(scripts/db.sh url)"
  base="${server%/*}"
  psql "$server" -qtAc "SELECT 1 FROM pg_database WHERE datname = 'compute'" | grep -q 1 \
    || psql "$server" -qc "CREATE DATABASE compute"
  export DATABASE_URL="$base/compute"
fi

export BC_FAKE_GCE_LISTEN="${BC_FAKE_GCE_LISTEN:-127.0.0.1:8085}"
export BC_FAKE_GCE_STATE="${BC_FAKE_GCE_STATE:-$root/.data/fake-gce.json}"
# Operations take a few seconds, as Compute Engine's do: a new managed
# instance is `provisioning` before `running`. Empty: at once.
export BC_FAKE_GCE_OPERATION_LATENCY_MS="${BC_FAKE_GCE_OPERATION_LATENCY_MS-2000-5000}"

# A database that holds provider accounts on this fake-gce while fake-gce's
# state file is missing (deleted, or a .data/ from before fake-gce kept its
# world): fake-gce would start empty and the worker's first scan would mark
# every reservation gone. Say so and start nothing.
fake_url="http://$BC_FAKE_GCE_LISTEN"
has_accounts="SELECT to_regclass('provider_accounts') IS NOT NULL"
if [ ! -e "$BC_FAKE_GCE_STATE" ] && [ "$(psql "$DATABASE_URL" -qtAc "$has_accounts")" = "t" ]; then
  accounts="$(echo "SELECT count(*) FROM provider_accounts \
    WHERE rtrim(config->>'endpoint', '/') = :'fake_url'" \
    | psql "$DATABASE_URL" -qtA -v fake_url="$fake_url")"
  if [ "$accounts" != "0" ]; then
    if [ "$private_db" = 1 ]; then
      started="Nothing was started but the private PostgreSQL."
      way_out="  just reset && just run    (stops the private PostgreSQL and removes .data/:
                              a new demo world is seeded)"
    else
      started="Nothing was started."
      way_out="  empty or drop the database of DATABASE_URL (yours: just reset leaves it alone),
  then: just reset && just run"
    fi
    cat >&2 <<MSG

just run: fake-gce's state file is missing, but the database holds a world built on fake-gce:
  $accounts provider account(s) on $fake_url (the demo world's, if it was seeded).
  state file: $BC_FAKE_GCE_STATE (deleted, or this .data/ is from before fake-gce kept its world)

Started on an empty fake-gce, the worker's first scan would mark every reservation gone:
grants would end (reservation-gone), instances go on-demand, managed VMs be lost.
$started To start over:
$way_out
or put the state file back.

MSG
    exit 1
  fi
fi

mkdir -p .data
if [ -z "${BC_BOOTSTRAP_TOKEN:-}" ]; then
  if [ ! -s .data/root-token ]; then
    (umask 077; printf 'bck_%s\n' "$(head -c 32 /dev/urandom | base32 | tr -d '=\n' | tr 'A-Z' 'a-z')" > .data/root-token)
  fi
  BC_BOOTSTRAP_TOKEN="$(cat .data/root-token)"
fi
export BC_BOOTSTRAP_TOKEN
# A development key for the secret store (contract 3.9), made once: secrets
# put under it stay readable across runs. Production keys come from the
# operator's secret manager (docs/operations.md).
if [ -z "${BC_SECRETS_KEY:-}" ]; then
  if [ ! -s .data/secrets-key ]; then
    (umask 077; head -c 32 /dev/urandom | base64 > .data/secrets-key)
  fi
  BC_SECRETS_KEY="$(cat .data/secrets-key)"
fi
export BC_SECRETS_KEY
export BC_LISTEN="${BC_LISTEN:-127.0.0.1:8080}"
export BC_CLOCK="${BC_CLOCK:-system}"
export BC_INTERVAL_MS="${BC_INTERVAL_MS:-10000}"
# Tenants' provider accounts may name Google and the local fake (only).
export BC_PROVIDER_ENDPOINTS="${BC_PROVIDER_ENDPOINTS:-https://compute.googleapis.com,http://$BC_FAKE_GCE_LISTEN}"
export RUST_LOG="${RUST_LOG:-info}"

echo "building..." >&2
cargo build --quiet --bins

pids=()
cleanup() {
  trap - INT TERM EXIT
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -f .data/run.pid
}
trap cleanup INT TERM EXIT
# For `just reset`, which stops a run still going before it removes .data/.
echo $$ > .data/run.pid

wait_ready() {
  for _ in $(seq 1 150); do
    curl -fsS "http://$BC_LISTEN/readyz" >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  echo "api-server did not become ready (see .data/api-server.out)" >&2
  exit 1
}

target/debug/fake-gce > .data/fake-gce.out &
fake=$!
pids+=("$fake")
# Its world read back (or a state file it cannot read: its message is above).
for _ in $(seq 1 150); do
  grep -q "listening on" .data/fake-gce.out 2>/dev/null && break
  if ! kill -0 "$fake" 2>/dev/null; then
    echo "fake-gce did not start (see its message above)" >&2
    exit 1
  fi
  sleep 0.2
done

# The demo world (BC_DEMO=0 skips it): seeded once, on a database without
# it, by an api-server on the manual clock so that three days of history are
# played and then metered; then the servers run on the system clock.
if [ "${BC_DEMO:-1}" != "0" ]; then
  BC_CLOCK=manual target/debug/api-server > .data/api-server-seed.out 2>&1 &
  seeder=$!
  pids+=("$seeder")
  wait_ready
  # A fresh database (only the root tenant): its manual clock goes back three
  # days, to the hour, so the seeder can play the story's past.
  if [ "$(psql "$DATABASE_URL" -qtAc "SELECT count(*) FROM tenants")" = "1" ]; then
    psql "$DATABASE_URL" -qc "UPDATE manual_clock SET now_ms = \
      (floor(extract(epoch FROM now()) / 3600) * 3600 - 3 * 86400)::bigint * 1000"
  fi
  BC_API="http://$BC_LISTEN" BC_TOKEN="$BC_BOOTSTRAP_TOKEN" BC_FAKE_GCE="http://$BC_FAKE_GCE_LISTEN" \
    target/debug/demo-seed > .data/demo.next.json
  if grep -q '"seeded":true' .data/demo.next.json; then
    (umask 077; mv .data/demo.next.json .data/demo.json)
    echo "demo world seeded; metering its history..." >&2
    BC_CLOCK=manual target/debug/reconciler-worker --once >> .data/api-server-seed.out 2>&1
  else
    rm -f .data/demo.next.json
  fi
  kill -TERM "$seeder"; wait "$seeder" 2>/dev/null || true
  pids=("${pids[@]:0:${#pids[@]}-1}")
fi

target/debug/api-server > .data/api-server.out &
pids+=($!)
wait_ready

target/debug/reconciler-worker &
pids+=($!)

cat <<MSG

  api-server        http://$BC_LISTEN   (clock: $BC_CLOCK)
  console           http://$BC_LISTEN/console/   (paste the root token below)
  fake-gce          http://$BC_FAKE_GCE_LISTEN   (demo reservations demo-a, demo-b of project
                    platform-dev, demo-m of platform-vms; operations take ${BC_FAKE_GCE_OPERATION_LATENCY_MS:-0} ms)
  fake-gce's world  $BC_FAKE_GCE_STATE   (kept across runs; just reset starts over)
  reconciler-worker every ${BC_INTERVAL_MS} ms
  database          ${DATABASE_URL}

  root token: $BC_BOOTSTRAP_TOKEN   (also in .data/root-token)
  secrets key: .data/secrets-key   (development only)
  demo tenants' keys: .data/demo.json   (acme, globex)

  Try the command line (target/debug/bcctl):
    export BC_ENDPOINT=http://$BC_LISTEN BC_TOKEN=\$(cat .data/root-token)
    target/debug/bcctl accounts list
    target/debug/bcctl grants list --all

  Ctrl-C stops everything.

MSG
wait -n "${pids[@]}" || true
echo "a process exited; stopping the others" >&2
