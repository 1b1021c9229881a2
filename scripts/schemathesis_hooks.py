"""Schemathesis hooks for scripts/api-fuzz.sh: the contract's rules that no
JSON Schema can state, applied to the generated bodies so that a schema-valid
body is also a contract-valid one. Each hook names the rule it encodes.
"""

import itertools

import schemathesis

# clock.set moves the manual clock forward only (contract 5): a smaller `now`
# than the clock's is INVALID_INPUT, which depends on state. Every generated
# `now` is replaced by the next value of one increasing series, so each
# clock.set the fuzzer sends moves the clock forward by a second.
_CLOCK = itertools.count(1_900_000_000_000, 1_000)


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
    body = case.body
    if case.operation.path.endswith("/clock/set") and isinstance(body, dict):
        now = body.get("now")
        # Only an in-range `now` (a negative case's bad value stays bad).
        if isinstance(now, int) and not isinstance(now, bool) and now >= 0:
            body["now"] = next(_CLOCK)
    return case


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
