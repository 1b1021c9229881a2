// @generated automatically by Diesel CLI.

diesel::table! {
    api_keys (key_id) {
        key_id -> Text,
        tenant_id -> Text,
        name -> Text,
        role -> Text,
        account_id -> Nullable<Text>,
        secret_hash -> Bytea,
        created_at -> Int8,
        revoked_at -> Nullable<Int8>,
    }
}

diesel::table! {
    archived_months (parent, month_start) {
        parent -> Text,
        month_start -> Int8,
        month_end -> Int8,
        table_name -> Text,
        detached_at -> Int8,
    }
}

diesel::table! {
    audit_records (audit_id) {
        audit_id -> Text,
        at -> Int8,
        tenant_id -> Text,
        key_id -> Text,
        method -> Text,
        object_ids -> Jsonb,
        outcome -> Text,
        code -> Nullable<Text>,
        request_id -> Text,
    }
}

diesel::table! {
    compacted_months (parent, month_start) {
        parent -> Text,
        month_start -> Int8,
        rows -> Int8,
        compacted_at -> Int8,
    }
}

diesel::table! {
    cursor_keys (id) {
        id -> Int2,
        key -> Bytea,
    }
}

diesel::table! {
    event_heads (tenant_id) {
        tenant_id -> Text,
        last_seq -> Int8,
    }
}

diesel::table! {
    events (tenant_id, seq, occurred_at) {
        tenant_id -> Text,
        seq -> Int8,
        event_id -> Text,
        event_type -> Text,
        data -> Jsonb,
        occurred_at -> Int8,
    }
}

diesel::table! {
    grant_expiry_notices (grant_id, before_ms) {
        grant_id -> Text,
        before_ms -> Int8,
        notice -> Text,
        sent_at -> Int8,
    }
}

diesel::table! {
    grant_underuse_checks (grant_id) {
        grant_id -> Text,
        checked_to -> Int8,
        reported_to -> Nullable<Int8>,
    }
}

diesel::table! {
    grants (grant_id) {
        grant_id -> Text,
        account_id -> Text,
        reservation_id -> Text,
        pool_id -> Text,
        tenant_id -> Text,
        project_id -> Nullable<Text>,
        slots -> Int4,
        starts_at -> Int8,
        ends_at -> Int8,
        settled_state -> Text,
        reason -> Nullable<Text>,
        created_at -> Int8,
        ended_at -> Nullable<Int8>,
        metered_through -> Int8,
        deficit_micro -> Int8,
        deficit_exact -> Nullable<Text>,
        lending -> Bool,
        lent_micro -> Int8,
    }
}

diesel::table! {
    idempotency_keys (tenant_id, method, idem_key) {
        tenant_id -> Text,
        method -> Text,
        idem_key -> Text,
        request_hash -> Bytea,
        object_id -> Text,
        created_at -> Int8,
    }
}

diesel::table! {
    installation (id) {
        id -> Text,
        created_at -> Int8,
    }
}

diesel::table! {
    instances (instance_id) {
        instance_id -> Text,
        tenant_id -> Text,
        project_id -> Nullable<Text>,
        pool_id -> Text,
        flavor -> Text,
        name -> Text,
        billing -> Text,
        state -> Text,
        placement_kind -> Text,
        grant_id -> Nullable<Text>,
        account_id -> Nullable<Text>,
        reservation_id -> Nullable<Text>,
        created_at -> Int8,
        deleted_at -> Nullable<Int8>,
        usage_metered_through -> Int8,
        powered -> Bool,
        managed -> Bool,
        vm_name -> Nullable<Text>,
        vm_zone -> Nullable<Text>,
        vm_account_id -> Nullable<Text>,
        vm_reservation_id -> Nullable<Text>,
        vm_status -> Nullable<Text>,
        vm_observed_at -> Nullable<Int8>,
        vm_changed_wall -> Nullable<Int8>,
        vm_missing_seq -> Nullable<Int8>,
        vm_missing_at -> Nullable<Int8>,
        failure_code -> Nullable<Text>,
        deleted_reason -> Nullable<Text>,
        interruptible -> Bool,
        lent_at -> Nullable<Int8>,
        interrupt_at -> Nullable<Int8>,
    }
}

diesel::table! {
    manual_clock (id) {
        id -> Int2,
        now_ms -> Int8,
    }
}

diesel::table! {
    placement_segments (segment_id) {
        segment_id -> Int8,
        instance_id -> Text,
        from_ms -> Int8,
        to_ms -> Nullable<Int8>,
        kind -> Text,
        running -> Bool,
        grant_id -> Nullable<Text>,
        account_id -> Nullable<Text>,
        reservation_id -> Nullable<Text>,
        billed -> Bool,
    }
}

diesel::table! {
    pool_offers (pool_id, tenant_id) {
        pool_id -> Text,
        tenant_id -> Text,
        offered_at -> Int8,
    }
}

diesel::table! {
    pools (pool_id) {
        pool_id -> Text,
        name -> Text,
        region -> Text,
        provider -> Text,
        account_id -> Text,
        flavors -> Jsonb,
        created_at -> Int8,
        vm -> Nullable<Jsonb>,
        lending_notice_s -> Nullable<Int4>,
    }
}

diesel::table! {
    projects (project_id) {
        project_id -> Text,
        tenant_id -> Text,
        name -> Text,
        created_at -> Int8,
    }
}

diesel::table! {
    provider_accounts (account_id) {
        account_id -> Text,
        tenant_id -> Text,
        name -> Text,
        provider -> Text,
        config -> Jsonb,
        created_at -> Int8,
        scan_failures -> Int4,
        scan_retry_at -> Nullable<Int8>,
        scan_seq -> Int8,
        scan_applied_seq -> Int8,
        scan_lease_until -> Nullable<Int8>,
        scan_claimed_at -> Nullable<Int8>,
    }
}

diesel::table! {
    quotas (tenant_id, pool_id, resource) {
        tenant_id -> Text,
        pool_id -> Text,
        resource -> Text,
        max_value -> Int8,
        used -> Int8,
    }
}

diesel::table! {
    reservation_steps (account_id, reservation_id, at) {
        account_id -> Text,
        reservation_id -> Text,
        at -> Int8,
        committed -> Int8,
    }
}

diesel::table! {
    reservation_totals (account_id, reservation_id, at) {
        account_id -> Text,
        reservation_id -> Text,
        at -> Int8,
        total -> Int8,
        short -> Bool,
    }
}

diesel::table! {
    reservations (account_id, reservation_id) {
        account_id -> Text,
        reservation_id -> Text,
        region -> Text,
        zone -> Text,
        flavor -> Text,
        total -> Int8,
        provider_in_use -> Int8,
        status -> Text,
        pool_id -> Nullable<Text>,
        last_scanned_at -> Int8,
        gone_at -> Nullable<Int8>,
    }
}

diesel::table! {
    secrets (tenant_id, name) {
        tenant_id -> Text,
        name -> Text,
        kind -> Text,
        fingerprint -> Text,
        key_id -> Text,
        nonce -> Bytea,
        ciphertext -> Bytea,
        created_at -> Int8,
        updated_at -> Int8,
    }
}

diesel::table! {
    tenants (tenant_id) {
        tenant_id -> Text,
        display_name -> Text,
        state -> Text,
        created_at -> Int8,
        deleted_at -> Nullable<Int8>,
    }
}

diesel::table! {
    usage_head (id) {
        id -> Int2,
        last_seq -> Int8,
    }
}

diesel::table! {
    usage_records (seq, period_start) {
        seq -> Int8,
        usage_id -> Text,
        tenant_id -> Text,
        project_id -> Nullable<Text>,
        meter -> Text,
        quantity_micro -> Int8,
        unit -> Text,
        period_start -> Int8,
        period_end -> Int8,
        grant_id -> Nullable<Text>,
        instance_id -> Nullable<Text>,
        subject -> Text,
        target -> Text,
        tags -> Jsonb,
        recorded_at -> Int8,
    }
}

diesel::table! {
    vm_listings (account_id) {
        account_id -> Text,
        listing_seq -> Int8,
        lease_until -> Nullable<Int8>,
        last_wall -> Nullable<Int8>,
        failures -> Int4,
    }
}

diesel::table! {
    vm_orphans (account_id, zone, vm_name) {
        account_id -> Text,
        zone -> Text,
        vm_name -> Text,
        instance_id -> Nullable<Text>,
        first_seq -> Int8,
        last_seq -> Int8,
        request_id -> Text,
        deleted_at -> Nullable<Int8>,
        found_at -> Nullable<Int8>,
    }
}

diesel::table! {
    vm_steps (step_id) {
        step_id -> Int8,
        instance_id -> Text,
        kind -> Text,
        request_id -> Text,
        state -> Text,
        zone -> Text,
        zone_index -> Int4,
        operation -> Nullable<Text>,
        attempts -> Int4,
        requested_at -> Int8,
        created_wall -> Int8,
        deadline_wall -> Int8,
        due_wall -> Int8,
        lease_until -> Nullable<Int8>,
        lease_token -> Nullable<Text>,
        finished_wall -> Nullable<Int8>,
        failure_code -> Nullable<Text>,
        sent_wall -> Nullable<Int8>,
    }
}

diesel::table! {
    webhook_attempts (attempt_seq) {
        attempt_seq -> Int8,
        delivery_id -> Text,
        webhook_id -> Text,
        event_id -> Text,
        event_type -> Text,
        attempt -> Int4,
        at -> Int8,
        outcome -> Text,
        status -> Nullable<Int4>,
        duration_ms -> Int8,
        next_attempt_at -> Nullable<Int8>,
    }
}

diesel::table! {
    webhook_deliveries (webhook_id, seq) {
        webhook_id -> Text,
        seq -> Int8,
        event_id -> Text,
        event_type -> Text,
        state -> Text,
        attempts -> Int4,
        next_at -> Int8,
        first_at -> Int8,
        lease_until -> Nullable<Int8>,
        lease_token -> Nullable<Text>,
        last_at -> Int8,
    }
}

diesel::table! {
    webhooks (webhook_id) {
        webhook_id -> Text,
        tenant_id -> Text,
        url -> Text,
        types -> Nullable<Array<Nullable<Text>>>,
        description -> Nullable<Text>,
        state -> Text,
        key_id -> Nullable<Text>,
        nonce -> Nullable<Bytea>,
        ciphertext -> Nullable<Bytea>,
        old_key_id -> Nullable<Text>,
        old_nonce -> Nullable<Bytea>,
        old_ciphertext -> Nullable<Bytea>,
        old_until -> Nullable<Int8>,
        from_seq -> Int8,
        scanned_seq -> Int8,
        failing_since -> Nullable<Int8>,
        created_at -> Int8,
        updated_at -> Int8,
        deleted_at -> Nullable<Int8>,
    }
}

diesel::joinable!(api_keys -> tenants (tenant_id));
diesel::joinable!(grant_expiry_notices -> grants (grant_id));
diesel::joinable!(grant_underuse_checks -> grants (grant_id));
diesel::joinable!(grants -> pools (pool_id));
diesel::joinable!(grants -> projects (project_id));
diesel::joinable!(grants -> tenants (tenant_id));
diesel::joinable!(instances -> pools (pool_id));
diesel::joinable!(instances -> projects (project_id));
diesel::joinable!(instances -> tenants (tenant_id));
diesel::joinable!(placement_segments -> instances (instance_id));
diesel::joinable!(pool_offers -> pools (pool_id));
diesel::joinable!(pool_offers -> tenants (tenant_id));
diesel::joinable!(projects -> tenants (tenant_id));
diesel::joinable!(provider_accounts -> tenants (tenant_id));
diesel::joinable!(quotas -> pools (pool_id));
diesel::joinable!(quotas -> tenants (tenant_id));
diesel::joinable!(reservations -> pools (pool_id));
diesel::joinable!(reservations -> provider_accounts (account_id));
diesel::joinable!(secrets -> tenants (tenant_id));
diesel::joinable!(vm_listings -> provider_accounts (account_id));
diesel::joinable!(vm_orphans -> provider_accounts (account_id));
diesel::joinable!(vm_steps -> instances (instance_id));
diesel::joinable!(webhook_attempts -> webhooks (webhook_id));
diesel::joinable!(webhook_deliveries -> webhooks (webhook_id));
diesel::joinable!(webhooks -> tenants (tenant_id));

diesel::allow_tables_to_appear_in_same_query!(
    api_keys,
    archived_months,
    audit_records,
    compacted_months,
    cursor_keys,
    event_heads,
    events,
    grant_expiry_notices,
    grant_underuse_checks,
    grants,
    idempotency_keys,
    installation,
    instances,
    manual_clock,
    placement_segments,
    pool_offers,
    pools,
    projects,
    provider_accounts,
    quotas,
    reservation_steps,
    reservation_totals,
    reservations,
    secrets,
    tenants,
    usage_head,
    usage_records,
    vm_listings,
    vm_orphans,
    vm_steps,
    webhook_attempts,
    webhook_deliveries,
    webhooks,
);
