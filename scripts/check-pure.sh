#!/usr/bin/env bash
# The pure core crates must not depend on I/O crates.
set -euo pipefail
status=0
for c in grants-core quotas-core iam-check; do
  bad=$(cargo tree -q -p "$c" -e normal --locked | grep -oE '\b(diesel|diesel-async|tokio|hyper|reqwest|mio)\b' | sort -u || true)
  if [ -n "$bad" ]; then
    echo "$c depends on I/O crates: $bad" >&2
    status=1
  fi
done
[ $status = 0 ] && echo "pure crates: no I/O dependencies"
exit $status
