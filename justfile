# Reservation grants and quotas control plane. `just --list` shows the recipes.

set shell := ["bash", "-euo", "pipefail", "-c"]

# List the recipes.
default:
    @just --list

# Start PostgreSQL (unless DATABASE_URL is set), fake-gce, api-server and reconciler-worker.
run:
    scripts/run.sh

# Start over: stop `just run` and the private PostgreSQL, remove .data/ (database, keys, fake-gce's world).
reset:
    #!/usr/bin/env bash
    set -euo pipefail
    pid="$(cat .data/run.pid 2>/dev/null || true)"
    if [ -n "$pid" ] && ps -o args= -p "$pid" 2>/dev/null | grep -q "scripts/run.sh"; then
      echo "reset: stopping just run (pid $pid)" >&2
      kill -TERM "$pid"
      for _ in $(seq 1 150); do kill -0 "$pid" 2>/dev/null || break; sleep 0.2; done
    fi
    scripts/db.sh stop
    rm -rf .data
    echo "reset: .data/ removed; just run starts a new world" >&2

# Run every test against a private PostgreSQL (or DATABASE_URL). First checks the
# tools the tests use and installs the missing ones as root (scripts/test-deps.sh).
test:
    #!/usr/bin/env bash
    set -euo pipefail
    scripts/test-deps.sh
    export DATABASE_URL="$(scripts/db.sh url)"
    # The end-to-end tests run the real binaries (api-server, worker,
    # demo-seed) found beside each other: build them all first.
    cargo build --workspace --bins --locked
    cargo test --workspace --all-targets --locked
    cargo test --workspace --doc --locked

# The end-to-end modules that run through PgBouncer in transaction pooling
# mode (docs/operations.md, "PgBouncer").
pgbouncer_tests := "smoke:: instances::lending:: billing::deficit:: grants::lifecycle:: instances::lifecycle:: instances::managed::a_vm_is_billed instances::managed::drift_the billing::basics:: events:: workers::replicas:: tenancy::api:: logs::audit:: idempotency:: pools_quotas:: partitions::"

# A representative part of the end-to-end suite with the api-server and the
# workers behind PgBouncer (transaction pooling, BC_DB_PREPARED_STATEMENTS=off);
# the tests' own set-up and checks go to PostgreSQL directly.
pgbouncer-test prepared="off":
    #!/usr/bin/env bash
    set -euo pipefail
    export DATABASE_URL="$(scripts/db.sh url)"
    export BC_TEST_POOLER_URL="$(scripts/pgbouncer.sh url)"
    export BC_DB_PREPARED_STATEMENTS="{{prepared}}" BC_DB_CHECK_POOLER=1
    cargo build --workspace --bins --locked
    # The same features as `just test` (`--workspace`): nothing is rebuilt.
    # Several migrations at once, through the pooler.
    cargo test --workspace --lib --locked -- db::tests::concurrent_migrations_apply_once
    cargo test --workspace --test it --locked -- {{pgbouncer_tests}}

# Stop the private PgBouncer.
pgbouncer-stop:
    scripts/pgbouncer.sh stop

# Formatting (and no line rustfmt would skip), clippy and rustdoc with warnings
# as errors, and the pure crates' dependency rule.
lint:
    scripts/check-width.sh
    cargo fmt --all --check
    cargo clippy --workspace --all-targets --locked -- -D warnings
    RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --locked
    scripts/check-pure.sh

# Check the Prometheus alerting rules and run their unit tests (needs promtool,
# Debian's `prometheus` package).
alerts-check:
    promtool check rules docs/ops/alerts.yml
    promtool test rules docs/ops/alerts_test.yml

# Check that crates/storage/src/schema.rs matches the migrations (needs diesel_cli).
schema-check:
    scripts/schema-check.sh

# Benchmarks against a private database (writes docs/benchmarks.md).
bench:
    #!/usr/bin/env bash
    set -euo pipefail
    cargo build --release --locked -p api-server -p reconciler-worker
    DATABASE_URL="$(scripts/db.sh url)" cargo run --release --locked -p bench

# List pages at a year of data (10M usage records and events, 100k grants); writes the
# scale part of docs/benchmarks.md. Not part of `just test`.
scale:
    #!/usr/bin/env bash
    set -euo pipefail
    cargo build --release --locked -p api-server
    DATABASE_URL="$(scripts/db.sh url)" cargo run --release --locked -p bench -- scale

# Regenerate docs/api/openapi.json from the method registry.
docs:
    cargo run --quiet -p api-server -- openapi > docs/api/openapi.json

# Start the private PostgreSQL and print its URL.
db:
    scripts/db.sh url

# Stop the private PostgreSQL.
db-stop:
    scripts/db.sh stop

# Failover under load: a primary and a synchronous standby (ports 29350,
# 29351), the primary SIGKILLed and the standby promoted (docs/operations.md).
failover:
    #!/usr/bin/env bash
    set -euo pipefail
    # It runs the real binaries found beside it: build them all first.
    cargo build --workspace --bins --locked
    cargo run --quiet --locked -p failover
