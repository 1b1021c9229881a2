#!/usr/bin/env bash
# The pure core crates must not depend on I/O crates, and storage must not
# depend on the providers (nor on an HTTP stack): it never calls a provider.
set -euo pipefail
status=0
for c in grants-core quotas-core iam-check; do
  bad=$(cargo tree -q -p "$c" -e normal --locked | grep -oE '\b(diesel|diesel-async|tokio|hyper|reqwest|mio)\b' | sort -u || true)
  if [ -n "$bad" ]; then
    echo "$c depends on I/O crates: $bad" >&2
    status=1
  fi
done
# Nor on serde: their types are not serializable, the wire names live in
# api-server only. (A failing `cargo tree`, a stale lock file, fails the script.)
for c in grants-core quotas-core iam-check; do
  tree=$(cargo tree -q -p "$c" -e normal --locked)
  bad=$(grep -oE '\b(serde|serde_json|serde_derive|serde_core)\b' <<<"$tree" | sort -u || true)
  if [ -n "$bad" ]; then
    echo "$c depends on serde: $bad" >&2
    status=1
  fi
done
bad=$(cargo tree -q -p storage -e normal --locked | grep -oE '\b(providers|reqwest|hyper)\b' | sort -u || true)
if [ -n "$bad" ]; then
  echo "storage depends on provider or HTTP crates: $bad" >&2
  status=1
fi
[ $status = 0 ] && echo "pure crates: no I/O or serde dependencies; storage: no provider or HTTP dependencies"
exit $status
