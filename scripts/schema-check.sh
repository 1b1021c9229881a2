#!/usr/bin/env bash
# Applies the migrations to a scratch database, checks that every down.sql
# reverses its up.sql (redo), and compares `diesel print-schema` with
# crates/storage/src/schema.rs.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
if ! command -v diesel >/dev/null 2>&1; then
  echo "installing diesel_cli (postgres only)" >&2
  cargo install diesel_cli --no-default-features --features postgres --locked >&2
fi
server="$(scripts/db.sh url)"
base="${server%%\?*}"; base="${base%/*}"
db="bc_schema_check_$$"
url="$base/$db"
psql "$server" -qc "CREATE DATABASE $db" >/dev/null
trap 'psql "$server" -qc "DROP DATABASE IF EXISTS $db WITH (FORCE)" >/dev/null 2>&1 || true' EXIT
# A config without print_schema, so running migrations does not rewrite
# schema.rs (the file under test); print-schema options come from diesel.toml.
mkdir -p target
cfg="target/diesel-check.toml"
printf '[migrations_directory]\ndir = "%s/migrations"\n' "$PWD" > "$cfg"
diesel migration run --config-file "$cfg" --database-url "$url" >/dev/null
n=$(ls -d migrations/*/ | wc -l)
diesel migration redo --config-file "$cfg" --all --database-url "$url" >/dev/null
diesel print-schema --database-url "$url" > "target/schema.generated.rs"
if diff -u crates/storage/src/schema.rs target/schema.generated.rs; then
  echo "schema.rs matches the migrations ($n migrations, each reversible)"
else
  echo "schema.rs differs from the migrations: run 'diesel print-schema' and commit it" >&2
  exit 1
fi
