"""Schemathesis hooks for scripts/api-fuzz.sh: the contract's rules that no
JSON Schema can state, applied to the generated bodies so that a schema-valid
body is also a contract-valid one. Each hook names the rule it encodes.
"""

import itertools
import json
import os
import urllib.request

import schemathesis

# clock.set moves the manual clock forward only (contract 5): a smaller `now`
# than the clock's is INVALID_INPUT, which depends on state. Just before each
# clock.set is sent (a replayed case included), an in-range `now` is replaced
# by the next value of one increasing series, so every clock.set moves the
# clock forward by a second. Run with one worker (the default): two workers
# could send two values out of order.
_CLOCK = itertools.count(1_900_000_000_000, 1_000)

# reservations.timeline covers at most 400 days (contract 3.10).
_MAX_TIMELINE_MS = 400 * 24 * 3_600_000
_MAX_INT64 = 2**63 - 1


def _instant(value):
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= _MAX_INT64


def _integral(value):
    """Contract 1.2: integers are JSON integers (no `1.0`). JSON Schema counts
    1.0 as an integer, so the generator sends it; the server rightly refuses.
    Integral floats become integers (the API has no non-integer numbers)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, dict):
        return {k: _integral(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_integral(v) for v in value]
    return value


# Case hooks, not body hooks: they apply in every phase, the coverage phase
# (boundary values) included.


@schemathesis.hook
def map_case(ctx, case):
    case.body = _integral(case.body)
    return case


def _call(method, body):
    """One call of the API under test, as the fuzzer's root caller."""
    url = f"http://{os.environ['BC_LISTEN']}/api/compute/{method}"
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={
            "Authorization": f"Bearer {os.environ['BC_BOOTSTRAP_TOKEN']}",
            "Content-Type": "application/json",
        },
    )
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return json.load(answer)
    except Exception:  # any failure: leave the case as generated
        return None


@schemathesis.hook
def before_call(ctx, case, **kwargs):
    body = case.body
    if not isinstance(body, dict):
        return
    path = case.operation.path
    if path.endswith("/apiKeys/revoke"):
        # The run's own root key (named "bootstrap") is not revoked: every
        # later request would be 401 and test nothing. Revoking it is the
        # same code path as revoking any other key.
        keys = _call("apiKeys/list", {"tenantId": "root"}) or {}
        own = [k.get("keyId") for k in keys.get("items") or [] if k.get("name") == "bootstrap"]
        if body.get("keyId") in own:
            body["keyId"] = "key_" + "0" * 26
    elif path.endswith("/providerAccounts/create"):
        # Contract 3.5: which credentials reference and endpoint an account
        # may name depends on its tenant and on the server's policy
        # (BC_CREDENTIAL_ENV=GCE_TOKEN, BC_PROVIDER_ENDPOINTS in
        # api-fuzz.sh) and on the tenant's secrets, which no schema can
        # state. A reference or endpoint the policy refuses is replaced by an
        # allowed one, so the case tests the create itself.
        config = body.get("config")
        if not isinstance(config, dict):
            return
        tenant = body.get("tenantId")
        root = tenant == "root"
        credentials = config.get("credentials")
        if isinstance(credentials, str):
            allowed = credentials == "none" or (
                root and credentials in ("adc", "env:GCE_TOKEN")
            )
            if credentials.startswith("secret:"):
                listed = _call("secrets/list", {"tenantId": tenant}) or {}
                names = [i.get("name") for i in listed.get("items") or []]
                allowed = credentials[len("secret:"):] in names
            if not allowed:
                config["credentials"] = "none"
        endpoint = config.get("endpoint")
        if not root and isinstance(endpoint, str) and not (
            endpoint.startswith("https://compute.googleapis.com")
            or endpoint.startswith("http://127.0.0.1:")
        ):
            del config["endpoint"]
    elif path.endswith("/clock/set"):
        now = body.get("now")
        # Only an in-range `now` (a negative case's bad value stays bad).
        if isinstance(now, int) and not isinstance(now, bool) and now >= 0:
            body["now"] = next(_CLOCK)
    elif path.endswith("/reservations/timeline") or path.endswith("/reservationGrants/usage"):
        # Contract 3.10: `to` is after `from`, and a timeline covers at most
        # 400 days (INVALID_INPUT on `to` otherwise). Two in-range instants
        # that break it are made a valid range of the same length, capped.
        start, end = body.get("from"), body.get("to")
        if not (_instant(start) and _instant(end)):
            return
        cap = _MAX_TIMELINE_MS if path.endswith("/timeline") else _MAX_INT64
        span = min(max(abs(end - start), 1), cap)
        if end <= start or end - start > cap:
            start = min(start, _MAX_INT64 - span)
            body["from"], body["to"] = start, start + span
    elif path.endswith("/instances/create"):
        # Contract 3.3: the flavor must be one the pool offers and the project
        # the tenant's (INVALID_INPUT otherwise), which depends on the pools
        # and projects the run made. A flavor or project that exists is put
        # in, so generated creations reach placement instead of stopping at
        # validation.
        tenant, pool = body.get("tenantId"), body.get("poolId")
        if not (isinstance(tenant, str) and isinstance(pool, str)):
            return
        answer = _call("pools/get", {"tenantId": tenant, "poolId": pool})
        flavors = ((answer or {}).get("pool") or {}).get("flavors") or []
        if flavors and isinstance(body.get("flavor"), str):
            names = [f["name"] for f in flavors]
            if body["flavor"] not in names:
                body["flavor"] = names[len(body["flavor"]) % len(names)]
        if isinstance(body.get("projectId"), str):
            projects = _call("projects/list", {"tenantId": tenant}) or {}
            ids = [p.get("projectId") for p in projects.get("items") or []]
            if body["projectId"] not in ids:
                del body["projectId"]


@schemathesis.hook
def filter_case(ctx, case):
    # pools.create: flavor names are unique within a pool (contract 3.1).
    # `uniqueItems` rules out identical flavors, not two flavors sharing a name.
    body = case.body
    if case.operation.path.endswith("/pools/create") and isinstance(body, dict):
        flavors = body.get("flavors")
        if isinstance(flavors, list):
            names = [repr(f.get("name")) for f in flavors if isinstance(f, dict)]
            if len(names) != len(set(names)):
                return False
    return True
