//! A development and test double of the Compute Engine reservations API and
//! of the Google authentication in front of it.
//!
//! It holds reservations, VMs, service-account keys and access tokens in
//! memory (and keeps its world in a state file when given one, below) and
//! serves, on loopback, plain HTTP or (given a certificate) HTTPS on the
//! one listen address. Errors of the GCE paths have Google's API shape
//! `{ "error": { "code", "message", "errors": [{ "domain", "reason",
//! "message" }] } }`; errors of `POST /token` have Google's OAuth shape
//! `{ "error", "error_description" }`.
//!
//! # The Compute Engine read path
//!
//! - `GET /compute/v1/projects/{project}/aggregated/reservations?maxResults=&pageToken=`:
//!   the GCE read path (int64 counts as JSON strings, zones as full URLs,
//!   `NO_RESULTS_ON_PAGE` warnings, pages of `maxResults`, default and cap 500).
//!   Every request to it is a *read call*, and the only one `/fake/calls`
//!   counts. In order: it is counted, waits the delay, answers an injected
//!   failure if one is due, then checks authentication (below), then answers
//!   the page (400 on a bad `maxResults` or `pageToken`). Zones made
//!   unreachable (`/fake/unreachable`) are left out of every page: each is a
//!   scope `zones/{zone}` holding only `"warning": { "code": "UNREACHABLE",
//!   "message": "Scope 'zones/{zone}' is unreachable.", "data": [{ "key":
//!   "scope", "value": "zones/{zone}" }] }`, or, with
//!   `returnPartialSuccess=true`, is absent from `items` and named in a
//!   top-level `"unreachables": ["zones/{zone}", ...]` (sorted).
//!
//! Authentication of every Compute Engine call, off unless configured:
//! - a static token (`BC_FAKE_GCE_TOKEN`): `Authorization: Bearer <token>` with
//!   exactly that token is accepted, for any call;
//! - `BC_FAKE_GCE_REQUIRE_AUTH=1`: `Authorization: Bearer <t>` is accepted
//!   when `t` was issued by `POST /token` or the metadata endpoint, has not
//!   expired and was not revoked; a call that changes a VM also needs `t` to
//!   have been granted `https://www.googleapis.com/auth/compute` (or
//!   `cloud-platform`).
//!
//! When either is configured, anything else answers 401 with `status`
//! `UNAUTHENTICATED` in the error and `WWW-Authenticate: Bearer
//! realm="https://accounts.google.com/"`; without an `Authorization` header
//! the error's reason is `required`, with a refused one it is `authError` and
//! the header also carries `, error="invalid_token"`. A live token granted
//! only `compute.readonly` that tries to change a VM answers 403 as Google
//! does: reason `insufficientPermissions`, `status` `PERMISSION_DENIED`, an
//! `ErrorInfo` detail with reason `ACCESS_TOKEN_SCOPE_INSUFFICIENT`, and
//! `WWW-Authenticate: ..., error="insufficient_scope", scope="..."`.
//!
//! # The Compute Engine instances API
//!
//! Under `/compute/v1/projects/{project}/`, with VMs in memory and the
//! authentication above. Every call waits the `/fake/delay` first. Its
//! `GET` calls (an instance, an operation, the aggregated list) are read
//! calls for `/fake/fail` too: after the delay they answer an injected
//! failure if one is due, before authentication. Its mutating calls are
//! recorded (`/fake/requests`), then authenticated, then (path and
//! `requestId` well-formed) held to the write quota, then applied; the next
//! ones `/fake/fail-mutations` names are answered with its failure after
//! they are applied, as an answer lost on its way back.
//!
//! - `POST zones/{zone}/instances?requestId=` with `{ name, machineType,
//!   labels?, reservationAffinity?, ... }` (other fields are accepted and
//!   ignored), `POST zones/{zone}/instances/{name}/stop?requestId=`,
//!   `POST .../start?requestId=` and `DELETE zones/{zone}/instances/{name}?requestId=`
//!   answer a `compute#operation` (`RUNNING`, or `DONE` with
//!   `BC_FAKE_GCE_OPERATION_POLLS=0` and no latency). The same `requestId`
//!   (a UUID) again answers the same operation and changes nothing. A create
//!   of a name that exists answers 409 `alreadyExists`; a stop, start or delete of a VM that
//!   does not exist, 404 `notFound`; a stop or start while the VM is between
//!   states, 400 `resourceNotReady`. A create whose
//!   `disks[].initializeParams.sourceImage` is under `projects/missing/`
//!   (as a path or a full URL) answers 404 `notFound` ("The resource
//!   'projects/missing/global/images/x' was not found") and starts nothing.
//! - `GET zones/{zone}/operations/{operation}`: the operation. It is `DONE`
//!   (with `error: { errors: [{ code, message }] }` and `httpErrorStatusCode`
//!   when it failed) once it has been read `BC_FAKE_GCE_OPERATION_POLLS`
//!   times (default 1; 0: at once) and, with
//!   `BC_FAKE_GCE_OPERATION_LATENCY_MS`, no sooner than its latency after it
//!   began, however often it is read; until then it answers `RUNNING`.
//!   Finishing it moves the VM to `RUNNING`, `TERMINATED` or away; until
//!   then it is `PROVISIONING`, `STAGING` or `STOPPING`. An operation that
//!   may finish is finished by the next request of any kind, so an operation
//!   read, a VM read, the lists, the quotas and `/fake/stats` all agree (with
//!   polls 0 it ends on time without ever being read).
//! - `GET zones/{zone}/instances/{name}`: a `compute#instance` (404
//!   `notFound` when absent).
//! - `GET aggregated/instances?filter=&maxResults=&pageToken=&returnPartialSuccess=`:
//!   paged like the reservations list and leaving unreachable zones out as
//!   it does. The filter takes `labels.KEY=VALUE` terms (`=` optionally
//!   spaced, the value bare or double-quoted) joined by `AND` or spaces, any
//!   of them in parentheses (`(labels.a=b) AND (labels.c=d)`), all of which
//!   must hold; anything else (`OR`, `!=`, other fields) answers 400.
//!
//! Quotas, off unless configured (per project):
//! - `BC_FAKE_GCE_WRITES_PER_MIN` ([`FakeGce::with_writes_per_min`]): mutating
//!   calls admitted per wall-clock minute (`now_ms / 60000`, refilled as the
//!   minute turns). Every authenticated mutating call whose path and
//!   `requestId` are well-formed counts, whatever it answers afterwards (a
//!   `requestId` replayed, a bad body's 400, a 404 or 409, the concurrent
//!   quota's 403); beyond the limit it answers 403 and changes and uses up
//!   nothing: `{ "error": { "code": 403, "message": "Quota exceeded for quota
//!   metric 'Write requests' and limit 'Write requests per minute' of service
//!   'compute.googleapis.com' for consumer 'project_number:N'.", "errors": [{
//!   "message", "domain": "usageLimits", "reason": "rateLimitExceeded" }],
//!   "status": "PERMISSION_DENIED", "details": [{ "@type":
//!   "type.googleapis.com/google.rpc.ErrorInfo",
//!   "reason": "RATE_LIMIT_EXCEEDED", "domain": "googleapis.com", "metadata":
//!   { "quota_metric": "compute.googleapis.com/write_requests", "quota_limit":
//!   "WriteRequestsPerMinutePerProject", "quota_limit_value": "<limit>",
//!   "quota_location": "global", "service": "compute.googleapis.com",
//!   "consumer": "projects/<project>" } }] } }` (N a stable number made from
//!   the project id). Authentication is checked first, as Google does.
//! - `BC_FAKE_GCE_CONCURRENT_OPERATIONS` ([`FakeGce::with_concurrent_operations`]):
//!   operations not yet `DONE`. A call that would start one more (not a
//!   replayed `requestId`, which answers its operation; not a call refused
//!   404, 409 or 400 first) answers the same 403 but for "'Concurrent
//!   operations' and limit 'Concurrent operations per project'", the reason
//!   `CONCURRENT_OPERATIONS_QUOTA_EXCEEDED`, `quota_metric`
//!   `compute.googleapis.com/concurrent_operations` and `quota_limit`
//!   `ConcurrentOperationsPerProject`; it changes nothing.
//!
//! A VM with a `SPECIFIC_RESERVATION` affinity holds one of that
//! reservation's `inUseCount` from its create (or start) until it is stopped
//! or deleted. A create on a full reservation, or whose machine type is not
//! the reservation's `machineType` (compared by last path segment), ends its
//! operation with `CONDITION_NOT_MET` (the message says which); on a
//! reservation that does not exist with `RESOURCE_NOT_FOUND`; no VM is made
//! either way.
//!
//! Hooks:
//! - `POST /fake/clock { nowMs }`: the clock the running intervals below are
//!   measured on (a test's manual clock; real time until set).
//! - `GET /fake/vm-runs` → `{ "runs": { NAME: [[from, to | null], ...] },
//!   "created": { NAME: n } }`: each VM name's intervals in status
//!   `RUNNING`, kept after it is gone, and how many VMs of it were made.
//! - `POST /fake/instances/{zone}/{name}/stop|start|delete`: a change made
//!   outside the platform, at once (the VM of that zone and name in any
//!   project; 404 when none). Answers the VM, or `{ "deleted": true }`.
//! - `POST /fake/fail-mutations { count, status?, retryAfterS? }`: the next
//!   `count` mutating instance calls that are applied (their `requestId`
//!   recorded, their operation started) are answered `status` (default 503)
//!   in the Google error shape instead of the operation, as `/fake/fail`
//!   answers. The same `requestId` sent again answers the operation. A new
//!   call replaces the count left; `count` 0 cancels.
//! - `POST /fake/fail-instances { count, code? }`: the next `count` creates'
//!   operations end with error `code` (default
//!   `ZONE_RESOURCE_POOL_EXHAUSTED`); a new call replaces the count left.
//! - `POST /fake/stockout { "zones": [...] }`: creates in those zones (any
//!   project) end their operation with `ZONE_RESOURCE_POOL_EXHAUSTED` ("The
//!   zone 'projects/{p}/zones/{z}' does not have enough resources available
//!   to fulfill the request. Try a different zone, or try again later.",
//!   `httpErrorStatusCode` 503) and leave no VM; `{ "zones": [] }` ends it.
//!   Answers `{ "zones": [...] }` (sorted); `GET` answers the same.
//! - `POST /fake/unreachable { "zones": [...] }`: both aggregated lists leave
//!   those zones out (see above), for every project, on every page, whether
//!   or not the project has anything there; the zone's own paths (a VM, an
//!   operation, a create) keep working. `{ "zones": [] }` ends it. Answers
//!   and `GET` as for `/fake/stockout`.
//! - `GET /fake/stats` → `{ "projects": { "<project>": { "mutatingCalls",
//!   "rateRefusals", "concurrentRefusals", "operationsInFlight",
//!   "peakOperationsInFlight" } } }`: the mutating calls held to the write
//!   quota (authenticated, well-formed), those it refused, those the
//!   concurrent quota refused, the operations not yet `DONE` and the most
//!   at once, since start or `DELETE /fake/stats` (which zeroes the counts,
//!   restarts each peak from what is in flight, and answers the result).
//! - `GET /fake/requests` → `{ "requests": [{ method, path, requestId }] }`:
//!   every mutating instances call received, in order, whatever it answered;
//!   `DELETE /fake/requests` forgets them.
//!
//! # Google authentication
//!
//! - `POST /token`: the OAuth 2.0 JWT bearer grant (RFC 7523) as Google's
//!   token endpoint. Body `application/x-www-form-urlencoded`:
//!   `grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer&assertion=<JWT>`.
//!   The JWT must be RS256 (header `alg`), signed by the key registered for
//!   its `iss`, with `aud` exactly `<scheme>://<Host header>/token` (`https`
//!   when serving TLS, else `http`), `exp` in the future, `iat` at most 60 s
//!   ahead, `exp - iat` from 1 to 3600 s, and a space-separated `scope`
//!   holding `https://www.googleapis.com/auth/compute.readonly` or
//!   `https://www.googleapis.com/auth/compute`. Answers 200
//!   `{ "access_token": "fake-ya29.<48 hex>", "expires_in": <TTL s>,
//!   "token_type": "Bearer" }`, the token valid for the TTL from now.
//!   Refusals answer 400 `{ "error", "error_description" }` with `error`:
//!   `unsupported_grant_type` (grant_type missing or other), `invalid_request`
//!   (Content-Type not form-encoded, a body that is not a valid form or names
//!   a parameter twice, no `assertion`, no Host header) or `invalid_grant`
//!   (everything about the JWT: not a JWT, not RS256, no or unregistered
//!   `iss`, bad signature, wrong `aud`, bad times, missing scope). A body
//!   over 1 MiB answers 413 `invalid_request`; another method 405.
//! - `GET /computeMetadata/v1/instance/service-accounts/default/token`: the
//!   metadata server's token endpoint. With `Metadata-Flavor: Google` it
//!   answers 200 with the same JSON as `POST /token` and a fresh token (and
//!   the `Metadata-Flavor: Google` response header); without that header,
//!   403 (plain text). The token is granted the comma-separated `scopes`
//!   query parameter, or `cloud-platform` without one; other parameters are
//!   ignored; another method 405.
//!
//! # Test and demo hooks
//!
//! - `PUT /fake/projects/{project}/zones/{zone}/reservations/{name}` with
//!   `{ count, inUseCount?, machineType, status? }`: create or replace (200, the
//!   stored reservation); `GET` and `DELETE` (200 `{ "deleted": true }`, 404
//!   when absent) on the same path.
//! - `PUT /fake/service-accounts/{email}` with `{ "publicKeyPem": "-----BEGIN
//!   PUBLIC KEY-----..." }` (SPKI `PUBLIC KEY` or PKCS#1 `RSA PUBLIC KEY`):
//!   registers or replaces the account's RSA key (200 `{ "email",
//!   "publicKeyPem" }`; 400 for a bad key, an unknown field or an email
//!   without `@`). `GET` answers the same (404 when absent); `DELETE`
//!   answers 200 `{ "deleted": true }` (404 when absent). The email may be
//!   percent-encoded (`%40`). Tokens already issued stay valid.
//! - `POST /fake/revoke-tokens`: every token issued so far stops working;
//!   200 `{ "revoked": n }`, n the tokens that were still live. Later tokens
//!   work.
//! - `GET /fake/tokens` → `{ "issued": n, "metadataIssued": m }`: tokens
//!   issued by `POST /token` (n) and by the metadata endpoint (m) since start
//!   or the last reset; `DELETE /fake/tokens` resets both (answers them,
//!   zero) and leaves the tokens valid.
//! - `GET /fake/token-scopes` → `{ "scopes": { "<scope>": n } }`: tokens
//!   issued (by either endpoint) per scope granted, since start or the last
//!   `DELETE /fake/tokens`.
//! - `POST /fake/fail { count, status?, retryAfterS? }`: the next `count`
//!   read calls (the reservations list and the instances API's `GET`s)
//!   answer `status` (default 503; any of 400 to 599) in the
//!   Google error shape, with `Retry-After: <retryAfterS>` when that is given
//!   (0 to 86400). A new call replaces the count left and the way they fail;
//!   `count` 0 cancels. Answers 200 with the values in effect (`retryAfterS`
//!   only when set).
//! - `GET /fake/calls` → `{ "calls": { "<project>": n } }`: how many read
//!   calls (requests to the list path above, one per page, whatever they
//!   answered: 200, 503, 401, ...) each project received since start or the
//!   last reset; `DELETE /fake/calls` resets the counts (answers
//!   `{ "calls": {} }`).
//! - `POST /fake/delay { ms }`: every later read call and instances API call
//!   waits `ms` milliseconds (at most 60000) before it is answered, so that
//!   concurrent scans overlap; `0` turns the delay off. A read call is
//!   counted when it arrives, before its delay.
//!
//! Hook bodies are JSON objects; unknown fields are refused (400). Unknown
//! paths answer 404, a known path with another method 405.
//!
//! # The state file
//!
//! With `BC_FAKE_GCE_STATE` ([`FakeGce::with_state_file`]) the fake keeps
//! its world across restarts in that file; without it everything lives in
//! memory only, as tests want. Kept: the reservations (ids, counts,
//! `inUseCount`, machine type, status, the zones listed), the VMs (id,
//! status, labels, affinity, whether they hold a reservation slot, creation
//! time), every zone operation (done or not, its error, the wall time its
//! latency ends, its reads left), the `requestId`s seen (the same one again
//! answers the same operation after a restart), the running intervals and
//! VMs made per name of `/fake/vm-runs`, the ids still to hand out, the
//! `/fake/clock` and the service accounts' public keys. Not kept (a restart
//! starts them afresh): issued access tokens (a client's next call answers
//! 401 and it fetches another), injected failures, the delay, unreachable
//! and stocked-out zones, the quota windows and every count
//! (`/fake/calls`, `/fake/tokens`, `/fake/token-scopes`, `/fake/stats`,
//! `/fake/requests`). The file holds no secret (public keys, and names and
//! labels the callers chose); it is written with mode 0600.
//!
//! The file is read once at start (a missing file: an empty world; one it
//! cannot read: the start fails, naming the variable, and the file is left
//! as it is), written at once, then after every request that changed the
//! world, before that request is answered, and when serving stops. Each
//! write goes whole to `PATH.tmp` and is renamed over `PATH`: a process
//! killed at any moment leaves the last whole world, never a torn one. An
//! operation in flight at a stop finishes after the start when its latency
//! has passed on the wall clock (at once if it already has); a VM left
//! `RUNNING` is still `RUNNING`, its running interval still open. The
//! format is in the `state` module's source (`"format": "fake-gce-state",
//! "version": 1`).
//!
//! # The binary
//!
//! `fake-gce` wraps [`serve`]; embed it the same way in a test harness if a
//! process is not wanted ([`FakeGceConfig`] holds the same settings). Its
//! environment:
//!
//! - `BC_FAKE_GCE_LISTEN`: `ip:port` (default `127.0.0.1:8085`; port 0 picks
//!   a free one).
//! - `BC_FAKE_GCE_TOKEN`: a static bearer token accepted on Compute Engine
//!   calls.
//! - `BC_FAKE_GCE_REQUIRE_AUTH`: `1`/`true` to require an issued token (of
//!   the `compute` scope for VM changes) on Compute Engine calls,
//!   `0`/`false`/empty (the default) not to.
//! - `BC_FAKE_GCE_TOKEN_TTL_S`: issued tokens' lifetime in seconds, an
//!   integer from 1 to 31536000 (default 3600).
//! - `BC_FAKE_GCE_TLS_CERT`, `BC_FAKE_GCE_TLS_KEY`: PEM files of the
//!   certificate chain (leaf first) and its private key; both or neither.
//!   With them it serves HTTPS only (TLS 1.2/1.3, HTTP/1.1); a failed
//!   handshake drops that connection only.
//! - `BC_FAKE_GCE_OPERATION_POLLS`: reads of a zone operation until it is
//!   `DONE`, 0 to 1000 (default 1; see [`FakeGce::with_operation_polls`]).
//! - `BC_FAKE_GCE_OPERATION_LATENCY_MS`: a zone operation is not `DONE`
//!   before this much wall time: `20000`, or `10000-40000` drawn uniformly
//!   per operation, each 0 to 3600000 (default none; see
//!   [`OperationLatency`]).
//! - `BC_FAKE_GCE_WRITES_PER_MIN`, `BC_FAKE_GCE_CONCURRENT_OPERATIONS`: the
//!   quotas above, 1 to 1000000 (default none).
//! - `BC_FAKE_GCE_STATE`: a file to keep the world in across restarts (see
//!   above; default none: in memory only). Its directory must exist.
//! - `RUST_LOG` (default `info`; logs go to stderr).
//!
//! When ready it prints one line to stdout: `fake-gce listening on
//! http://ADDR` (`https://ADDR` with TLS). A bad setting makes it exit with
//! status 1 and a message on stderr naming the variable.

mod auth;
mod compute;
mod filter;
mod hooks;
mod instances;
mod realism;
mod router;
mod server;
mod state;
mod store;
mod tls;
mod tokens;
mod vms;
mod wire;

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant};

use auth::Auth;
pub use auth::{ACCESS_TOKEN_PREFIX, COMPUTE_READONLY_SCOPE, JWT_BEARER_GRANT};
pub use realism::{MAX_OPERATION_LATENCY_MS, OperationLatency};
pub use server::{serve, shutdown_signal};
pub use state::{STATE_FORMAT, STATE_VERSION, StateError};
use store::Store;
pub use store::{MAX_PAGE_SIZE, ReservationSpec};
pub use tls::{TlsError, TlsIdentity};
use vms::{Pace, Vms};

/// Where the binary listens when `BC_FAKE_GCE_LISTEN` is not set.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8085";
/// How long issued access tokens live unless configured otherwise.
pub const DEFAULT_TOKEN_TTL: Duration = Duration::from_secs(3600);
/// The longest token lifetime the binary accepts (`BC_FAKE_GCE_TOKEN_TTL_S`).
pub const MAX_TOKEN_TTL_S: u64 = 365 * 86_400;
/// The path of the metadata server's token endpoint.
pub const METADATA_TOKEN_PATH: &str = "/computeMetadata/v1/instance/service-accounts/default/token";
/// How many reads of a zone operation it takes to finish, unless configured.
pub const DEFAULT_OPERATION_POLLS: u32 = 1;

/// How the fake behaves.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FakeGceConfig {
    /// When set, Compute Engine calls carrying `Authorization: Bearer
    /// <token>` with this token are accepted, and calls without it answer
    /// 401 (unless they carry a token [`require_auth`](Self::require_auth)
    /// accepts).
    pub required_token: Option<String>,
    /// When true, Compute Engine calls must carry a token issued by `POST
    /// /token` or the metadata endpoint, unexpired and not revoked (else
    /// 401), and granted the `compute` scope for a VM change (else 403).
    pub require_auth: bool,
    /// How long an issued token is valid; `expires_in` is its whole seconds.
    /// Default [`DEFAULT_TOKEN_TTL`].
    pub token_ttl: Duration,
    /// When set, [`serve`] speaks HTTPS with this identity instead of HTTP,
    /// and `POST /token` expects an `https://` audience.
    pub tls: Option<TlsIdentity>,
}

impl Default for FakeGceConfig {
    fn default() -> Self {
        FakeGceConfig {
            required_token: None,
            require_auth: false,
            token_ttl: DEFAULT_TOKEN_TTL,
            tls: None,
        }
    }
}

/// The fake's state and request handling; clones share the state.
#[derive(Debug, Clone)]
pub struct FakeGce {
    store: Arc<Mutex<Store>>,
    auth: Arc<Mutex<Auth>>,
    /// Locked before `store` when both are held.
    vms: Arc<Mutex<Vms>>,
    pace: Pace,
    /// Admitted mutating calls per project and wall-clock minute.
    writes_per_min: Option<u32>,
    /// The clock the write-quota minutes are cut on.
    quota_clock: realism::WallClock,
    required_authorization: Option<Arc<str>>,
    require_auth: bool,
    token_ttl: Duration,
    tls: Option<TlsIdentity>,
    /// The state file, when the world is kept across restarts.
    persist: Option<Arc<state::Persist>>,
}

impl Default for FakeGce {
    fn default() -> Self {
        FakeGce::new(FakeGceConfig::default())
    }
}

impl FakeGce {
    /// An empty fake.
    pub fn new(config: FakeGceConfig) -> Self {
        FakeGce {
            store: Arc::default(),
            auth: Arc::default(),
            vms: Arc::default(),
            pace: Pace {
                polls: DEFAULT_OPERATION_POLLS,
                latency: None,
                concurrent: None,
            },
            writes_per_min: None,
            quota_clock: realism::WallClock::default(),
            required_authorization: config.required_token.map(|t| format!("Bearer {t}").into()),
            require_auth: config.require_auth,
            token_ttl: config.token_ttl,
            tls: config.tls,
            persist: None,
        }
    }

    /// Zone operations finish on their `polls`-th read; every earlier read
    /// answers them `RUNNING` (0: they are `DONE` in the call's own answer).
    #[must_use]
    pub fn with_operation_polls(mut self, polls: u32) -> Self {
        self.pace.polls = polls;
        self
    }

    /// `https` when the fake is configured with TLS, else `http`.
    pub fn scheme(&self) -> &'static str {
        if self.tls.is_some() { "https" } else { "http" }
    }

    fn store(&self) -> MutexGuard<'_, Store> {
        // The store is left consistent by every critical section, so a panic
        // elsewhere does not make it unusable.
        self.store.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The VMs, with every operation that may be done by now finished, so
    /// that every reader sees the same.
    fn vms(&self) -> MutexGuard<'_, Vms> {
        // As for the store: every critical section leaves it consistent.
        let mut vms = self.vms.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        if vms.has_due(now) {
            vms.settle(&mut self.store(), now);
        }
        vms
    }

    /// Finishes every operation that may be done by now (their effects show
    /// in reservations' `inUseCount` too).
    fn settle(&self) {
        drop(self.vms());
    }

    fn auth(&self) -> MutexGuard<'_, Auth> {
        // As for the store: every critical section leaves it consistent.
        self.auth.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
