#!/usr/bin/env bash
# The pure core crates must not depend on I/O crates nor on serde (their types
# are not serializable; the wire names live in api-server only), and storage
# must not depend on the providers nor on an HTTP stack: it never calls a
# provider. A failing `cargo tree` (a stale lock file, say) fails the script.
set -euo pipefail
shopt -s inherit_errexit
status=0

# The crates `$1`'s normal dependency tree holds among the pattern `$2`.
found() {
  local tree
  tree=$(cargo tree -q -p "$1" -e normal --locked)
  grep -oE "\\b($2)\\b" <<<"$tree" | sort -u || true
}

for c in grants-core quotas-core iam-check; do
  bad=$(found "$c" 'diesel|diesel-async|tokio|hyper|reqwest|mio')
  if [ -n "$bad" ]; then
    echo "$c depends on I/O crates: $bad" >&2
    status=1
  fi
  bad=$(found "$c" 'serde|serde_json|serde_derive|serde_core')
  if [ -n "$bad" ]; then
    echo "$c depends on serde: $bad" >&2
    status=1
  fi
done
bad=$(found storage 'providers|reqwest|hyper')
if [ -n "$bad" ]; then
  echo "storage depends on provider or HTTP crates: $bad" >&2
  status=1
fi
[ $status = 0 ] && echo "pure crates: no I/O or serde dependencies; storage: no provider or HTTP dependencies"
exit $status
