//! Provider accounts and the reservations their scans see (contract 3.5).

use schemars::JsonSchema;
use serde::Serialize;
use storage::ops::{accounts, reservations};

use super::{Millis, Object, object};

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

/// `providerAccounts.delete`.
#[derive(Debug, Serialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AccountDeleted {
    /// The deleted account.
    pub account_id: String,
    /// Always true.
    pub deleted: bool,
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

replies! {
    /// `{ "account": Account }`
    AccountReply { account: Account as "account" }
    /// `{ "reservation": Reservation }`
    ReservationReply { reservation: Reservation as "reservation" }
}
