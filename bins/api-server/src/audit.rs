//! The audit trail's writer (contract 3.11): what the request pipeline
//! learns of a mutation call ([`Trail`]) and the one record it writes when
//! the call has answered ([`Trail::record`]), in a transaction of its own.
//! `docs/decisions.md`, "Audit trail", has the rules.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Map, Value};
use storage::model::audit::{self, NewAuditRecord};
use storage::model::states::AuditOutcome;
use storage::ops::tenancy::Authenticated;

use crate::app::App;
use crate::error::{ApiError, Code};
use crate::registry::{Kind, Method, Reply};

/// At most this many ids in one record.
const MAX_IDS: usize = 64;
/// Longer strings are not taken as ids.
const MAX_ID_LEN: usize = 256;

/// What a handler tells the trail about its call: for now, that an
/// idempotent create was a replay.
#[derive(Debug, Default)]
pub struct Marks {
    replayed: AtomicBool,
}

impl Marks {
    /// Marks the call as a replay (or not).
    pub fn set_replayed(&self, replayed: bool) {
        self.replayed.store(replayed, Ordering::Relaxed);
    }

    /// Whether a handler marked the call as a replay.
    pub fn replayed(&self) -> bool {
        self.replayed.load(Ordering::Relaxed)
    }
}

/// What the pipeline knows of one call of a method, for its record.
pub struct Trail {
    kind: Kind,
    method: String,
    /// The key's id and tenant, once authenticated.
    caller: Option<(String, String)>,
    /// The validated input (mutations only).
    input: Option<Value>,
    marks: Arc<Marks>,
}

impl Trail {
    /// The trail of a call of `m`.
    pub fn of(m: &Method) -> Trail {
        Trail {
            kind: m.kind,
            method: m.name(),
            caller: None,
            input: None,
            marks: Arc::default(),
        }
    }

    /// The call authenticated as `caller`.
    pub fn caller(&mut self, caller: &Authenticated) {
        self.caller = Some((caller.key_id.clone(), caller.principal.tenant_id.clone()));
    }

    /// The call's input passed validation.
    pub fn input(&mut self, input: &Value) {
        if self.kind == Kind::Mutation {
            self.input = Some(input.clone());
        }
    }

    /// What the handler marks.
    pub fn marks(&self) -> Arc<Marks> {
        self.marks.clone()
    }

    /// Writes the record of a mutation call that authenticated (nothing for
    /// reads and for calls refused before authentication), in its own
    /// transaction at the server's now. A record that cannot be written is
    /// logged as an error; the call's answer stands (the mutation may have
    /// committed, and an error would invite a retry of it).
    pub async fn record(&self, app: &App, request_id: &str, result: &Result<Reply, ApiError>) {
        if self.kind != Kind::Mutation {
            return;
        }
        let Some((key_id, tenant)) = &self.caller else {
            return;
        };
        let (outcome, code) = outcome(result, self.marks.replayed());
        let answer = result
            .as_ref()
            .ok()
            .and_then(|r| serde_json::from_str::<Value>(&r.0).ok());
        let ids = object_ids(tenant, self.input.as_ref(), answer.as_ref());
        let new = NewAuditRecord {
            tenant_id: tenant,
            key_id,
            method: &self.method,
            object_ids: &ids,
            outcome,
            code: code.map(Code::as_str),
            request_id,
        };
        let written = async {
            let mut conn = app.conn().await?;
            let now = app.clock.now(&mut conn).await?;
            Ok::<_, ApiError>(
                storage::db::single_write(&mut conn, async |conn| {
                    audit::insert(conn, &new, now).await
                })
                .await?,
            )
        }
        .await;
        if let Err(e) = written {
            tracing::error!(
                method = %self.method,
                key = %key_id,
                tenant = %tenant,
                outcome = outcome.as_str(),
                code = code.map_or("", Code::as_str),
                object_ids = ?ids,
                error = %e,
                "audit record not written"
            );
        }
    }
}

/// The outcome and code of a call's answer.
pub fn outcome(result: &Result<Reply, ApiError>, replayed: bool) -> (AuditOutcome, Option<Code>) {
    match result {
        Ok(_) if replayed => (AuditOutcome::Replayed, None),
        Ok(_) => (AuditOutcome::Ok, None),
        Err(e) if e.code == Code::AccessDenied => (AuditOutcome::Denied, Some(e.code)),
        Err(e) => (AuditOutcome::Failed, Some(e.code)),
    }
}

/// The ids a call named and created: the string fields whose names end in
/// `Id` (and the strings of arrays whose names end in `Ids`) at the top
/// level of the input, of the answer, and of each object directly under
/// the answer (`{ "grant": { "grantId", "accountId", ... } }`); in that
/// order, each once, without the acting tenant's own id (the record's
/// `tenantId`), at most `MAX_IDS`.
pub fn object_ids(acting: &str, input: Option<&Value>, answer: Option<&Value>) -> Vec<String> {
    let mut out = Vec::new();
    if let Some(Value::Object(input)) = input {
        ids_in(input, acting, &mut out);
    }
    if let Some(Value::Object(answer)) = answer {
        ids_in(answer, acting, &mut out);
        for v in answer.values() {
            if let Value::Object(inner) = v {
                ids_in(inner, acting, &mut out);
            }
        }
    }
    out.truncate(MAX_IDS);
    out
}

fn ids_in(object: &Map<String, Value>, acting: &str, out: &mut Vec<String>) {
    let mut push = |id: &str| {
        if id != acting && !id.is_empty() && id.len() <= MAX_ID_LEN && !out.iter().any(|o| o == id)
        {
            out.push(id.to_owned());
        }
    };
    for (name, value) in object {
        match value {
            Value::String(id) if name.ends_with("Id") => push(id),
            Value::Array(items) if name.ends_with("Ids") => {
                items.iter().filter_map(Value::as_str).for_each(&mut push);
            }
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn ids_come_from_the_input_and_the_answer_once_each() {
        let input = json!({
            "tenantId": "root",
            "accountId": "pacct_1",
            "reservationId": "projects/p/zones/z/reservations/r",
            "grantTenantId": "acme",
            "slots": 2,
            "idempotencyKey": "k-1",
        });
        let answer = json!({ "grant": {
            "grantId": "rgrant_1",
            "accountId": "pacct_1",
            "tenantId": "acme",
            "poolId": "pool_1",
            "config": { "deepId": "not-taken" },
        } });
        let ids = object_ids("root", Some(&input), Some(&answer));
        assert_eq!(
            ids,
            [
                "pacct_1",
                "acme",
                "projects/p/zones/z/reservations/r",
                "rgrant_1",
                "pool_1",
            ]
        );
    }

    #[test]
    fn secrets_and_bodies_are_not_ids() {
        let input = json!({ "tenantId": "acme", "name": "gce-key", "value": "hunter2" });
        let answer = json!({ "apiKey": { "keyId": "key_1" }, "secret": "bck_x", "ids": ["a"] });
        assert_eq!(object_ids("acme", Some(&input), Some(&answer)), ["key_1"]);
        let listed = json!({ "accountIds": ["pacct_1", "pacct_2"], "other": ["x"] });
        assert_eq!(
            object_ids("acme", Some(&listed), None),
            ["pacct_1", "pacct_2"]
        );
        assert!(object_ids("acme", None, None).is_empty());
    }

    #[test]
    fn outcomes_follow_the_answer() {
        let ok: Result<Reply, ApiError> = Ok(Reply("{}".into()));
        assert_eq!(outcome(&ok, false), (AuditOutcome::Ok, None));
        assert_eq!(outcome(&ok, true), (AuditOutcome::Replayed, None));
        let denied = Err(ApiError::access_denied("no"));
        assert_eq!(
            outcome(&denied, false),
            (AuditOutcome::Denied, Some(Code::AccessDenied))
        );
        let missing = Err(ApiError::new(Code::NotFound, "no such grant"));
        assert_eq!(
            outcome(&missing, false),
            (AuditOutcome::Failed, Some(Code::NotFound))
        );
    }
}
