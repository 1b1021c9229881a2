#!/usr/bin/env bash
# Fails if a tracked Rust source line is longer than rustfmt's width (100
# columns, rustfmt's default): rustfmt silently leaves a whole body
# unformatted when one of its lines is too long to fit, so `cargo fmt
# --check` alone cannot be trusted while such a line exists.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
max=100
long="$(git ls-files -z '*.rs' | xargs -0 env LC_ALL=C.UTF-8 awk -v max="$max" \
  'length($0) > max { printf "%s:%d: %d columns\n", FILENAME, FNR, length($0) }')"
if [ -n "$long" ]; then
  echo "lines over $max columns (rustfmt skips the bodies that hold them):" >&2
  echo "$long" >&2
  exit 1
fi
echo "no Rust line over $max columns"
