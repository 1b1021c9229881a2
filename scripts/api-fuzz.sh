#!/usr/bin/env bash
# Runs Schemathesis against a fresh api-server with the committed OpenAPI
# document: every method, schema-valid and schema-invalid bodies, every
# response checked against its documented status and schema.
#   scripts/api-fuzz.sh [extra schemathesis args]
# Needs python3 (a venv with schemathesis is made under target/).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

venv=target/pyenv
if [ ! -x "$venv/bin/schemathesis" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install -q schemathesis
fi

server="$(scripts/db.sh url)"
base="${server%/*}"
db="fuzz_$$"
psql "$server" -qc "CREATE DATABASE $db"
export DATABASE_URL="$base/$db"
export BC_BOOTSTRAP_TOKEN="bck_fuzz$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')"
export BC_LISTEN="${BC_FUZZ_LISTEN:-127.0.0.1:8097}"
export BC_CLOCK=manual
export BC_CREDENTIAL_ENV=GCE_TOKEN
export BC_PROVIDER_ENDPOINTS="https://compute.googleapis.com,http://127.0.0.1:*"
export BC_SECRETS_KEY="$(head -c 32 /dev/urandom | base64)"
export RUST_LOG=warn

cargo build --quiet -p api-server
target/debug/api-server > target/api-fuzz-server.log 2>&1 &
pid=$!
cleanup() {
  kill "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  psql "$server" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" || true
}
trap cleanup EXIT
for _ in $(seq 1 100); do
  curl -fsS "http://$BC_LISTEN/readyz" >/dev/null 2>&1 && break
  sleep 0.2
done

export PYTHONPATH="$root/scripts" SCHEMATHESIS_HOOKS=schemathesis_hooks
"$venv/bin/schemathesis" --config-file scripts/schemathesis.toml run docs/api/openapi.json \
  --url "http://$BC_LISTEN" \
  --header "Authorization: Bearer $BC_BOOTSTRAP_TOKEN" \
  "$@"
