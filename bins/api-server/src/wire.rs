//! What the wire shows: every success response as a type, serialized with the
//! contract's camelCase names and described by its JSON Schema (the OpenAPI
//! document's `components.schemas`). Storage returns domain types; each view
//! is built from one by moving its fields, never by copying a JSON tree.

use schemars::JsonSchema;
use serde::Serialize;
use serde_json::{Map, Value};
use storage::model::events;
use storage::model::instance::InstanceRow;
use storage::ops::{accounts, grants, metering, pools, reservations, secrets, tenancy};

/// Epoch milliseconds (UTC).
type Millis = i64;

/// A JSON object whose keys the contract leaves open.
type Object = Map<String, Value>;

fn object(v: Value) -> Object {
    match v {
        Value::Object(m) => m,
        // Storage writes objects only; anything else shows as empty.
        _ => Object::new(),
    }
}

/// A reservation grant (contract 3.2).
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Grant {
    /// `rgrant_...`
    pub grant_id: String,
    /// Provider account of the reservation.
    pub account_id: String,
    /// The reservation.
    pub reservation_id: String,
    /// The reservation's pool.
    pub pool_id: String,
    /// The grantee.
    pub tenant_id: String,
    /// The one project served, if the grant is limited to one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub project_id: Option<String>,
    /// Committed slots.
    pub slots: i32,
    /// Term start.
    pub starts_at: Millis,
    /// Term end (exclusive).
    pub ends_at: Millis,
    /// The state at the server's now.
    #[schemars(extend("enum" = ["scheduled", "active", "ended", "cancelled"]))]
    pub state: &'static str,
    /// Why it ended or was cancelled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// Creation instant.
    pub created_at: Millis,
    /// End or cancellation instant.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ended_at: Option<Millis>,
    /// Slot-hours are written up to this instant.
    pub metered_through: Millis,
}

impl From<grants::Grant> for Grant {
    fn from(g: grants::Grant) -> Grant {
        let r = g.row;
        Grant {
            grant_id: r.grant_id,
            account_id: r.account_id,
            reservation_id: r.reservation_id,
            pool_id: r.pool_id,
            tenant_id: r.tenant_id,
            project_id: r.project_id,
            slots: r.slots,
            starts_at: r.starts_at,
            ends_at: r.ends_at,
            state: g.state.as_str(),
            reason: g.reason,
            created_at: r.created_at,
            ended_at: g.ended_at,
            metered_through: r.metered_through,
        }
    }
}

/// A reservation seen by a scan of a provider account (contract 3.5), with
/// its slot accounts at the server's now (contract 3.10, 4).
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Reservation {
    /// The provider account.
    pub account_id: String,
    /// The provider's id.
    pub reservation_id: String,
    /// Region.
    pub region: String,
    /// Zone.
    pub zone: String,
    /// Machine type.
    pub flavor: String,
    /// Slots.
    pub total: i64,
    /// Slots the provider reports in use.
    pub provider_in_use: i64,
    /// Whether it can serve instances.
    #[schemars(extend("enum" = ["ready", "not-ready", "gone"]))]
    pub status: &'static str,
    /// The pool it is bound to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pool_id: Option<String>,
    /// Last scan instant.
    pub last_scanned_at: Millis,
    /// When a scan found it gone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gone_at: Option<Millis>,
    /// The slots of the grants live now (non-cancelled, startsAt <= now <
    /// endsAt), used or not.
    pub granted_slots: u64,
    /// The instances those grants hold, running or stopped.
    pub held_in_grants: u64,
    /// Running instances on it outside any grant.
    pub ordinary_in_use: u64,
    /// total - grantedSlots - ordinaryInUse, floored at 0: the slots anyone
    /// may take.
    pub ordinary_free: u64,
    /// max(running instances on it, providerInUse).
    pub physical_in_use: u64,
}

impl From<reservations::Reservation> for Reservation {
    fn from(r: reservations::Reservation) -> Reservation {
        let (row, a) = (r.row, r.accounts);
        Reservation {
            account_id: row.account_id,
            reservation_id: row.reservation_id,
            region: row.region,
            zone: row.zone,
            flavor: row.flavor,
            total: row.total,
            provider_in_use: row.provider_in_use,
            status: row.status.as_str(),
            pool_id: row.pool_id,
            last_scanned_at: row.last_scanned_at,
            gone_at: row.gone_at,
            granted_slots: a.granted_slots,
            held_in_grants: a.held_in_grants,
            ordinary_in_use: a.ordinary_in_use,
            ordinary_free: a.ordinary_free,
            physical_in_use: a.physical_in_use,
        }
    }
}

/// Another tenant's grant on a reservation's timeline, as a grantee sees
/// it: its slots and term only, no ids.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(extend("additionalProperties" = false))]
pub struct AnonymousGrant {
    /// Committed slots.
    pub slots: u32,
    /// Term start.
    pub starts_at: Millis,
    /// Term end (exclusive).
    pub ends_at: Millis,
}

/// A grant on a reservation's timeline: a full Grant (root's view, and the
/// reader's own grants), or another tenant's as an AnonymousGrant.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(untagged)]
pub enum TimelineGrant {
    /// In full.
    Full(Box<Grant>),
    /// Anonymous.
    Anonymous(AnonymousGrant),
}

/// One step of the committed slots.
#[derive(Debug, Serialize, JsonSchema)]
pub struct CommittedStep {
    /// First instant.
    pub from: Millis,
    /// First instant after it.
    pub to: Millis,
    /// The slots of the grants live throughout it.
    pub slots: u64,
}

/// One step of the running instances.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InUseStep {
    /// First instant.
    pub from: Millis,
    /// First instant after it.
    pub to: Millis,
    /// Running instances held in grants.
    pub in_grants: u64,
    /// Running instances on ordinary slots.
    pub ordinary: u64,
}

/// A grant transition or capacity change on a reservation's timeline.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct TimelineEvent {
    /// When it happened.
    pub at: Millis,
    /// `reservation-grant.created`, `.active`, `.ended`, `.cancelled`,
    /// `reservation-grant.capacity-short`, or `reservation.gone`.
    #[serde(rename = "type")]
    pub event_type: String,
    /// The grant it is about (absent for capacity changes, and for other
    /// tenants' grants when a grantee reads).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grant_id: Option<String>,
}

/// A reservation's timeline over `[from, to)` (contract 3.10).
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReservationTimeline {
    /// The reservation.
    pub reservation_id: String,
    /// Its slots (from the last scan).
    pub total: i64,
    /// The range's start.
    pub from: Millis,
    /// The range's end (exclusive).
    pub to: Millis,
    /// The grants whose term meets the range, by start.
    pub grants: Vec<TimelineGrant>,
    /// Live committed slots over [from, to): contiguous, gapless, merged
    /// where equal.
    pub committed: Vec<CommittedStep>,
    /// Running instances in grants and on ordinary slots over the part of
    /// the range up to now.
    pub in_use: Vec<InUseStep>,
    /// Grant transitions and capacity changes in the range, oldest first.
    pub events: Vec<TimelineEvent>,
}

impl From<storage::ops::views::Timeline> for ReservationTimeline {
    fn from(t: storage::ops::views::Timeline) -> ReservationTimeline {
        use storage::ops::views::GrantOnTimeline;
        ReservationTimeline {
            reservation_id: t.reservation.reservation_id,
            total: t.reservation.total,
            from: t.from,
            to: t.to,
            grants: t
                .grants
                .into_iter()
                .map(|g| match g {
                    GrantOnTimeline::Full(g) => TimelineGrant::Full(Box::new((*g).into())),
                    GrantOnTimeline::Anonymous(a) => TimelineGrant::Anonymous(AnonymousGrant {
                        slots: a.slots,
                        starts_at: a.starts_at,
                        ends_at: a.ends_at,
                    }),
                })
                .collect(),
            committed: t
                .committed
                .into_iter()
                .map(|s| CommittedStep {
                    from: s.from,
                    to: s.to,
                    slots: s.slots,
                })
                .collect(),
            in_use: t
                .in_use
                .into_iter()
                .map(|s| InUseStep {
                    from: s.from,
                    to: s.to,
                    in_grants: s.in_grants,
                    ordinary: s.ordinary,
                })
                .collect(),
            events: t
                .events
                .into_iter()
                .map(|e| TimelineEvent {
                    at: e.at,
                    event_type: e.event_type,
                    grant_id: e.grant_id,
                })
                .collect(),
        }
    }
}

/// `reservationGrants.preview` (contract 3.6): what `create` of the same
/// input would decide and bill.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GrantPreview {
    /// Whether the grant fits the reservation over its term.
    pub fits: bool,
    /// The reservation's total slots.
    pub total: u64,
    /// The peak overlap of the existing grants over the term, without the
    /// new one.
    pub granted: u64,
    /// `total - granted`, floored at 0.
    pub available: u64,
    /// The exact total vm.grant.slot.hours would add up to (6 decimals).
    #[schemars(regex(pattern = r"^[0-9]+\.[0-9]{6}$"))]
    pub slot_hours: String,
    /// The start of the first hour bucket it would bill.
    pub first_period_start: Millis,
    /// The end of the last hour bucket it would bill.
    pub last_period_end: Millis,
    /// The instances it would take in if it started now (empty for a
    /// future start, and when it does not fit).
    pub take_in: Vec<String>,
}

impl From<storage::ops::grants::Preview> for GrantPreview {
    fn from(p: storage::ops::grants::Preview) -> GrantPreview {
        GrantPreview {
            fits: p.fits,
            total: p.total,
            granted: p.granted,
            available: p.available,
            slot_hours: grants_core::format_micros(p.slot_micros),
            first_period_start: p.first_period_start,
            last_period_end: p.last_period_end,
            take_in: p.take_in,
        }
    }
}

/// One hour bucket of a grant (`reservationGrants.usage`).
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GrantHour {
    /// The bucket's start.
    pub period_start: Millis,
    /// The bucket's end.
    pub period_end: Millis,
    /// The grant's slots.
    pub slots: u32,
    /// Slot-hours committed and billed in the hour: its
    /// vm.grant.slot.hours record (6 decimals), also for hours not billed
    /// yet.
    #[schemars(regex(pattern = r"^[0-9]+\.[0-9]{6}$"))]
    pub slot_hours: String,
    /// Instance-hours held in the grant, running or stopped, up to now.
    #[schemars(regex(pattern = r"^[0-9]+\.[0-9]{6}$"))]
    pub held_hours: String,
    /// Instance-hours running in the grant, up to now.
    #[schemars(regex(pattern = r"^[0-9]+\.[0-9]{6}$"))]
    pub usage_hours: String,
}

impl From<grants_core::views::HourRow> for GrantHour {
    fn from(r: grants_core::views::HourRow) -> GrantHour {
        GrantHour {
            period_start: r.period_start,
            period_end: r.period_end,
            slots: r.slots,
            slot_hours: grants_core::format_micros(r.slot_micros),
            held_hours: grants_core::format_micros(r.held_micros),
            usage_hours: grants_core::format_micros(r.usage_micros),
        }
    }
}

/// An event of a tenant's log (contract 4).
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    /// `evt_...`
    pub event_id: String,
    /// The tenant whose log holds it.
    pub tenant_id: String,
    /// The event type, e.g. `reservation-grant.created`.
    #[serde(rename = "type")]
    pub event_type: String,
    /// The payload; its keys depend on the type.
    pub data: Object,
    /// When the change happened.
    pub occurred_at: Millis,
}

impl From<events::Event> for Event {
    fn from(e: events::Event) -> Event {
        Event {
            event_id: e.event_id,
            tenant_id: e.tenant_id,
            event_type: e.event_type,
            data: object(e.data),
            occurred_at: e.occurred_at,
        }
    }
}

/// A record of the audit trail (contract 3.11): one mutation call.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuditRecord {
    /// `aud_...`
    pub audit_id: String,
    /// The server's clock when the call answered.
    pub at: Millis,
    /// The acting tenant (the calling key's).
    pub tenant_id: String,
    /// The calling key.
    pub key_id: String,
    /// `module.method`.
    pub method: String,
    /// The ids the call named and created.
    pub object_ids: Vec<String>,
    /// How the call ended.
    #[schemars(extend("enum" = ["ok", "denied", "replayed", "failed"]))]
    pub outcome: &'static str,
    /// The code it answered, when refused or failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub code: Option<String>,
    /// The request's `x-request-id`.
    pub request_id: String,
}

impl From<storage::model::audit::AuditRecord> for AuditRecord {
    fn from(r: storage::model::audit::AuditRecord) -> AuditRecord {
        AuditRecord {
            object_ids: r.ids(),
            audit_id: r.audit_id,
            at: r.at,
            tenant_id: r.tenant_id,
            key_id: r.key_id,
            method: r.method,
            outcome: r.outcome.as_str(),
            code: r.code,
            request_id: r.request_id,
        }
    }
}

/// A flavor a pool offers.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Flavor {
    /// Provider machine type, e.g. `n2-standard-4`.
    pub name: String,
    /// vCPUs per instance.
    pub vcpus: i64,
    /// Memory per instance in GiB.
    pub memory_gib: i64,
    /// GPUs per instance.
    pub gpus: i64,
}

/// A pool (contract 3.1).
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Pool {
    /// `pool_...`
    pub pool_id: String,
    /// Name.
    pub name: String,
    /// Region, e.g. `us-central1`.
    pub region: String,
    /// Provider name.
    pub provider: String,
    /// The root provider account behind the pool.
    pub account_id: String,
    /// Flavors.
    pub flavors: Vec<Flavor>,
    /// Tenants the pool is offered to (to root: all of them; to a tenant: itself).
    pub offered_to: Vec<String>,
    /// Creation instant.
    pub created_at: Millis,
}

impl From<pools::Pool> for Pool {
    fn from(p: pools::Pool) -> Pool {
        Pool {
            pool_id: p.pool_id,
            name: p.name,
            region: p.region,
            provider: p.provider,
            account_id: p.account_id,
            flavors: p
                .flavors
                .into_iter()
                .map(|f| Flavor {
                    name: f.name,
                    vcpus: f.vcpus,
                    memory_gib: f.memory_gib,
                    gpus: f.gpus,
                })
                .collect(),
            offered_to: p.offered_to,
            created_at: p.created_at,
        }
    }
}

/// One quota row (contract 5).
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Quota {
    /// The pool.
    pub pool_id: String,
    /// The resource (`instances`, `vcpus`, ...).
    pub resource: String,
    /// The maximum in effect.
    pub max: i64,
    /// Currently charged.
    pub used: i64,
    /// `max - used`, never below 0.
    pub available: i64,
}

impl From<pools::Quota> for Quota {
    fn from(q: pools::Quota) -> Quota {
        Quota {
            pool_id: q.pool_id,
            resource: q.resource,
            max: q.max,
            used: q.used,
            available: q.available,
        }
    }
}

/// A tenant.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Tenant {
    /// The tenant's chosen name.
    pub tenant_id: String,
    /// Display name.
    pub display_name: String,
    /// Lifecycle state.
    #[schemars(extend("enum" = ["active", "deleted"]))]
    pub state: &'static str,
    /// Creation instant.
    pub created_at: Millis,
    /// Deletion instant.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deleted_at: Option<Millis>,
}

impl From<tenancy::Tenant> for Tenant {
    fn from(t: tenancy::Tenant) -> Tenant {
        Tenant {
            tenant_id: t.tenant_id,
            display_name: t.display_name,
            state: t.state.as_str(),
            created_at: t.created_at,
            deleted_at: t.deleted_at,
        }
    }
}

/// A project of a tenant.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Project {
    /// `prj_...`
    pub project_id: String,
    /// Owning tenant.
    pub tenant_id: String,
    /// Name.
    pub name: String,
    /// Creation instant.
    pub created_at: Millis,
}

impl From<tenancy::Project> for Project {
    fn from(p: tenancy::Project) -> Project {
        Project {
            project_id: p.project_id,
            tenant_id: p.tenant_id,
            name: p.name,
            created_at: p.created_at,
        }
    }
}

/// An API key (never its secret).
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApiKey {
    /// `key_...`
    pub key_id: String,
    /// Owning tenant.
    pub tenant_id: String,
    /// Name.
    pub name: String,
    /// The key's role.
    #[schemars(extend("enum" = ["admin", "provider-admin", "member", "viewer"]))]
    pub role: String,
    /// The one provider account the key is limited to, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub account_id: Option<String>,
    /// Creation instant.
    pub created_at: Millis,
    /// Revocation instant.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revoked_at: Option<Millis>,
}

impl From<tenancy::ApiKey> for ApiKey {
    fn from(k: tenancy::ApiKey) -> ApiKey {
        ApiKey {
            key_id: k.key_id,
            tenant_id: k.tenant_id,
            name: k.name,
            role: k.role,
            account_id: k.account_id,
            created_at: k.created_at,
            revoked_at: k.revoked_at,
        }
    }
}

/// A newly issued key with its secret, shown once.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IssuedKey {
    /// The key.
    pub api_key: ApiKey,
    /// The secret (`bck_...`); the server keeps only its hash.
    pub secret: String,
}

impl From<tenancy::IssuedKey> for IssuedKey {
    fn from(k: tenancy::IssuedKey) -> IssuedKey {
        IssuedKey {
            api_key: k.api_key.into(),
            secret: k.secret,
        }
    }
}

/// Where an instance is.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Placement {
    /// What serves it.
    #[schemars(extend("enum" = ["grant", "reservation", "ondemand", "none"]))]
    pub kind: String,
    /// The grant, when in one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grant_id: Option<String>,
    /// The reservation, when in one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reservation_id: Option<String>,
}

/// An instance (contract 3.3).
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Instance {
    /// `inst_...`
    pub instance_id: String,
    /// Owner.
    pub tenant_id: String,
    /// Project.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub project_id: Option<String>,
    /// Pool.
    pub pool_id: String,
    /// Flavor.
    pub flavor: String,
    /// Name.
    pub name: String,
    /// Who pays for its hours.
    #[schemars(extend("enum" = ["standard", "none"]))]
    pub billing: String,
    /// Power state.
    #[schemars(extend("enum" = ["running", "stopped", "deleted"]))]
    pub state: &'static str,
    /// Where it is.
    pub placement: Placement,
    /// Creation instant.
    pub created_at: Millis,
}

impl From<InstanceRow> for Instance {
    fn from(i: InstanceRow) -> Instance {
        Instance {
            instance_id: i.instance_id,
            tenant_id: i.tenant_id,
            project_id: i.project_id,
            pool_id: i.pool_id,
            flavor: i.flavor,
            name: i.name,
            billing: i.billing.as_str().to_owned(),
            state: i.state.as_str(),
            placement: Placement {
                kind: i.placement_kind,
                grant_id: i.grant_id,
                reservation_id: i.reservation_id,
            },
            created_at: i.created_at,
        }
    }
}

/// One usage record (contract 6).
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct UsageRecord {
    /// `use_...`
    pub usage_id: String,
    /// The billed tenant.
    pub tenant_id: String,
    /// Project.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub project_id: Option<String>,
    /// Meter name.
    pub meter: String,
    /// A decimal with exactly 6 fractional digits, e.g. `"0.500000"`.
    #[schemars(regex(pattern = r"^[0-9]+\.[0-9]{6}$"))]
    pub quantity: String,
    /// The unit of the quantity.
    #[schemars(extend("enum" = ["slot-hours", "instance-hours"]))]
    pub unit: String,
    /// Hour bucket start.
    pub period_start: Millis,
    /// Hour bucket end.
    pub period_end: Millis,
    /// Grant.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grant_id: Option<String>,
    /// Instance.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub instance_id: Option<String>,
    /// Tags.
    pub tags: Object,
    /// When it was written.
    pub recorded_at: Millis,
}

impl From<metering::UsageRecord> for UsageRecord {
    fn from(r: metering::UsageRecord) -> UsageRecord {
        UsageRecord {
            usage_id: r.usage_id,
            tenant_id: r.tenant_id,
            project_id: r.project_id,
            meter: r.meter,
            quantity: r.quantity,
            unit: r.unit,
            period_start: r.period_start,
            period_end: r.period_end,
            grant_id: r.grant_id,
            instance_id: r.instance_id,
            tags: object(r.tags),
            recorded_at: r.recorded_at,
        }
    }
}

/// A provider account (its config holds secret references only).
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Account {
    /// `pacct_...`
    pub account_id: String,
    /// Owning tenant.
    pub tenant_id: String,
    /// Name.
    pub name: String,
    /// Provider name.
    #[schemars(extend("enum" = ["gce"]))]
    pub provider: String,
    /// Validated configuration (secret references, never secret values).
    pub config: Object,
    /// Creation instant.
    pub created_at: Millis,
}

impl From<accounts::Account> for Account {
    fn from(a: accounts::Account) -> Account {
        Account {
            account_id: a.account_id,
            tenant_id: a.tenant_id,
            name: a.name,
            provider: a.provider,
            config: object(a.config),
            created_at: a.created_at,
        }
    }
}

/// `{ "items": [...] }`: a whole list (at most 1000 items).
#[derive(Debug, Serialize, JsonSchema)]
#[schemars(rename = "{T}List")]
pub struct Items<T> {
    /// The items.
    pub items: Vec<T>,
}

impl<T> Items<T> {
    /// Views of domain values.
    pub fn of<D: Into<T>>(values: Vec<D>) -> Items<T> {
        Items {
            items: values.into_iter().map(Into::into).collect(),
        }
    }
}

/// One page of a paged list (a log, oldest first, or a newest-first list),
/// with the cursor to continue from.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "{T}Page")]
pub struct Page<T> {
    /// The items, in the list's order.
    pub items: Vec<T>,
    /// Pass as `after` to read on (also when `hasMore` is false, to poll).
    pub next_cursor: String,
    /// Whether more items follow now.
    pub has_more: bool,
}

impl<T> Page<T> {
    /// The view of a storage page of a newest-first list of ids with
    /// `prefix`.
    pub fn of<D: Into<T>>(page: storage::model::keyset::Page<D>, prefix: &str) -> Page<T> {
        Page {
            next_cursor: page.next.encode(prefix),
            has_more: page.has_more,
            items: page.items.into_iter().map(Into::into).collect(),
        }
    }
}

/// Declares `{ "<noun>": View }` answers.
macro_rules! replies {
    ($($(#[$m:meta])* $name:ident { $field:ident: $view:ident as $wire:literal })*) => {$(
        $(#[$m])*
        #[derive(Debug, Serialize, JsonSchema)]
        pub struct $name {
            #[doc = "The object."]
            #[serde(rename = $wire)]
            pub $field: $view,
        }
        impl<D: Into<$view>> From<D> for $name {
            fn from(d: D) -> $name {
                $name { $field: d.into() }
            }
        }
    )*};
}

replies! {
    /// `{ "grant": Grant }`
    GrantReply { grant: Grant as "grant" }
    /// `{ "instance": Instance }`
    InstanceReply { instance: Instance as "instance" }
    /// `{ "pool": Pool }`
    PoolReply { pool: Pool as "pool" }
    /// `{ "quota": Quota }`
    QuotaReply { quota: Quota as "quota" }
    /// `{ "account": Account }`
    AccountReply { account: Account as "account" }
    /// `{ "reservation": Reservation }`
    ReservationReply { reservation: Reservation as "reservation" }
    /// `{ "preview": GrantPreview }`
    PreviewReply { preview: GrantPreview as "preview" }
    /// `{ "timeline": ReservationTimeline }`
    TimelineReply { timeline: ReservationTimeline as "timeline" }
    /// `{ "tenant": Tenant }`
    TenantReply { tenant: Tenant as "tenant" }
    /// `{ "project": Project }`
    ProjectReply { project: Project as "project" }
    /// `{ "apiKey": ApiKey }`
    ApiKeyReply { api_key: ApiKey as "apiKey" }
    /// `{ "secret": Secret }`
    SecretReply { secret: Secret as "secret" }
}

/// `tenants.create`: the tenant and its first admin key.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CreatedTenant {
    /// The tenant.
    pub tenant: Tenant,
    /// Its first admin key, with the secret shown once.
    pub admin_key: IssuedKey,
}

/// A secret of the tenant (contract 3.9): never its value.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Secret {
    /// Its name.
    pub name: String,
    /// The owning tenant.
    pub tenant_id: String,
    /// What the value is.
    #[schemars(extend("enum" = ["service-account", "token"]))]
    pub kind: String,
    /// The first 16 hex digits of the value's SHA-256.
    #[schemars(extend("pattern" = "^[0-9a-f]{16}$"))]
    pub fingerprint: String,
    /// Creation instant.
    pub created_at: Millis,
    /// Last `secrets.put`.
    pub updated_at: Millis,
}

impl From<secrets::SecretInfo> for Secret {
    fn from(s: secrets::SecretInfo) -> Secret {
        Secret {
            name: s.name,
            tenant_id: s.tenant_id,
            kind: s.kind,
            fingerprint: s.fingerprint,
            created_at: s.created_at,
            updated_at: s.updated_at,
        }
    }
}

/// `secrets.delete`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct SecretDeleted {
    /// The deleted secret.
    pub name: String,
    /// Always true.
    pub deleted: bool,
}

/// `providerAccounts.delete`.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AccountDeleted {
    /// The deleted account.
    pub account_id: String,
    /// Always true.
    pub deleted: bool,
}

/// `clock.get` and `clock.set`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ClockReading {
    /// The server's now.
    pub now: Millis,
    /// The clock mode.
    #[schemars(extend("enum" = ["system", "manual"]))]
    pub mode: &'static str,
}
