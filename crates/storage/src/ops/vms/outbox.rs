//! The VM steps' outbox (contract 3.12): a step is a row written in the
//! transaction that decides it, with its `requestId`, and a `NOTIFY` that
//! wakes the worker when that transaction commits. The worker claims and
//! finishes steps through [`super`].

use diesel::prelude::*;
use diesel::sql_types::{BigInt, Text};
use diesel_async::{AsyncPgConnection, RunQueryDsl};
use grants_core::vm::StepKind;

use crate::clock::DB_NOW_MS;
use crate::error::Result;
use crate::model::states::StepState;
use crate::schema::vm_steps;

/// The channel the api-server notifies when it records a step.
pub const STEPS_CHANNEL: &str = "bc_vm_steps";

/// How long a step may take before it gives up, unless the worker's
/// `BC_VM_STEP_TIMEOUT` says otherwise (10 minutes, contract 3.12).
pub const DEFAULT_STEP_TIMEOUT_MS: i64 = 10 * 60 * 1000;

/// Records a step of instance `instance_id` in the outbox, to be sent to `zone`, and wakes
/// the worker when the transaction commits.
pub async fn record_step(
    conn: &AsyncPgConnection,
    instance_id: &str,
    kind: StepKind,
    zone: &str,
    now: i64,
) -> Result<()> {
    let request_id = uuid::Uuid::now_v7().to_string();
    // The step and its notification, pipelined: one round trip.
    let (mut step, mut notify) = (conn, conn);
    // Fixed texts: kept prepared (`db::cached`).
    futures::try_join!(
        crate::db::cached(
            diesel::sql_query(format!(
                "INSERT INTO vm_steps (instance_id, kind, request_id, zone, requested_at, \
                 created_wall, deadline_wall, due_wall) \
                 VALUES ($1, $2, $3, $4, $5, {DB_NOW_MS}, {DB_NOW_MS} + $6, {DB_NOW_MS})"
            ))
            .bind::<Text, _>(instance_id)
            .bind::<Text, _>(kind.as_str())
            .bind::<Text, _>(&request_id)
            .bind::<Text, _>(zone)
            .bind::<BigInt, _>(now)
            .bind::<BigInt, _>(DEFAULT_STEP_TIMEOUT_MS)
        )
        .execute(&mut step),
        crate::db::cached(
            diesel::sql_query("SELECT pg_notify($1, $2)")
                .bind::<Text, _>(STEPS_CHANNEL)
                .bind::<Text, _>(instance_id)
        )
        .execute(&mut notify),
    )?;
    tracing::info!(
        instance = %instance_id,
        step = kind.as_str(),
        request_id = %request_id,
        "vm step recorded"
    );
    Ok(())
}

/// Whether `inst` has a step not finished yet.
pub async fn has_open_step(conn: &mut AsyncPgConnection, instance_id: &str) -> Result<bool> {
    let n: i64 = vm_steps::table
        .filter(vm_steps::instance_id.eq(instance_id))
        .filter(vm_steps::state.eq(StepState::Open))
        .count()
        .get_result(conn)
        .await?;
    Ok(n > 0)
}
