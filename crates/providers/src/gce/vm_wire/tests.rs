use super::*;

fn spec() -> VmSpec {
    VmSpec {
        name: "bc-01jd".into(),
        zone: "us-central1-a".into(),
        machine_type: "n2-standard-4".into(),
        labels: BTreeMap::from([("bc-managed".into(), "true".into())]),
        reservation: Some("res-a".into()),
        image: "projects/debian-cloud/global/images/family/debian-12".into(),
        disk_gb: 20,
        network: "global/networks/default".into(),
        subnetwork: None,
        service_account: None,
    }
}

#[test]
fn the_create_body_is_the_contracts() {
    let body = create_body(&spec());
    assert_eq!(
        body,
        json!({
            "name": "bc-01jd",
            "machineType": "zones/us-central1-a/machineTypes/n2-standard-4",
            "labels": { "bc-managed": "true" },
            "reservationAffinity": {
                "consumeReservationType": "SPECIFIC_RESERVATION",
                "key": "compute.googleapis.com/reservation-name",
                "values": ["res-a"],
            },
            "disks": [{ "boot": true, "autoDelete": true, "initializeParams": {
                "sourceImage": "projects/debian-cloud/global/images/family/debian-12",
                "diskSizeGb": "20",
            } }],
            "networkInterfaces": [{ "network": "global/networks/default" }],
        })
    );
    let on_demand = VmSpec {
        reservation: None,
        subnetwork: Some("regions/us-central1/subnetworks/a".into()),
        service_account: Some("vm@p.iam.gserviceaccount.com".into()),
        ..spec()
    };
    let body = create_body(&on_demand);
    assert_eq!(
        body["reservationAffinity"],
        json!({ "consumeReservationType": "NO_RESERVATION" })
    );
    assert_eq!(
        body["networkInterfaces"][0]["subnetwork"],
        "regions/us-central1/subnetworks/a"
    );
    assert_eq!(
        body["serviceAccounts"],
        json!([{ "email": "vm@p.iam.gserviceaccount.com",
                 "scopes": ["https://www.googleapis.com/auth/cloud-platform"] }])
    );
}

#[test]
fn names() {
    for good in ["bc-01jd", "us-central1-a", "operation-1733-5f3a", "a"] {
        assert!(valid_name(good), "{good}");
    }
    let long = "a".repeat(129);
    for bad in [
        "",
        "Bc",
        "1a",
        "a-",
        "a/b",
        "a?b",
        "a b",
        "..",
        long.as_str(),
    ] {
        assert!(!valid_name(bad), "{bad}");
    }
}

#[test]
fn operations_are_read_with_their_errors() {
    let running = br#"{"kind":"compute#operation","name":"operation-1","status":"RUNNING",
            "zone":"https://www.googleapis.com/compute/v1/projects/p/zones/us-central1-b"}"#;
    let op = parse_operation(running, "us-central1-a").expect("operation");
    assert_eq!(op.status, OperationStatus::Running);
    assert_eq!(op.zone, "us-central1-b");
    assert!(op.error_codes.is_empty());

    let failed = br#"{"name":"operation-2","status":"DONE","httpErrorStatusCode":412,
            "error":{"errors":[{"code":"CONDITION_NOT_MET","message":"full"},
                               {"code":"<b>","message":"x"}]}}"#;
    let op = parse_operation(failed, "us-central1-a").expect("operation");
    assert_eq!(op.zone, "us-central1-a");
    assert_eq!(op.error_codes, ["CONDITION_NOT_MET", "UNKNOWN"]);
    assert_eq!(op.error_messages, ["full", "x"]);
    assert!(!op.succeeded());

    for bad in [
        &br#"{"name":"operation-3","status":"SOMETHING"}"#[..],
        br#"{"status":"DONE"}"#,
        br#"{"name":"op/../x","status":"DONE"}"#,
        b"not json",
    ] {
        assert!(
            matches!(parse_operation(bad, "z"), Err(ProviderError::Malformed(_))),
            "{}",
            String::from_utf8_lossy(bad)
        );
    }
}

#[test]
fn instances_and_pages() {
    let vm = br#"{"name":"bc-1","status":"RUNNING","labels":{"bc-managed":"true"},
            "zone":"https://www.googleapis.com/compute/v1/projects/p/zones/us-central1-a"}"#;
    let vm = parse_instance(vm).expect("instance");
    assert_eq!(vm.zone, "us-central1-a");
    assert_eq!(vm.labels["bc-managed"], "true");

    let page = br#"{"items":{
            "zones/us-central1-a":{"instances":[{"name":"bc-1","status":"TERMINATED"}]},
            "zones/europe-west4-b":{"warning":{"code":"NO_RESULTS_ON_PAGE"}}},
            "nextPageToken":"t2"}"#;
    let (vms, next) = parse_instance_page(page).expect("page");
    assert_eq!(vms.len(), 1);
    assert_eq!(vms[0].zone, "us-central1-a");
    assert!(vms[0].labels.is_empty());
    assert_eq!(next.as_deref(), Some("t2"));
    let (_, next) = parse_instance_page(br#"{"nextPageToken":""}"#).expect("page");
    assert_eq!(next, None);

    let unreachable = br#"{"items":{"zones/us-east1-b":{"warning":{"code":"UNREACHABLE"}},
            "zones/us-central1-a":{"instances":[{"name":"bc-1","status":"RUNNING"}]}}}"#;
    let err = parse_instance_page(unreachable).expect_err("unreachable");
    assert!(err.is_retryable(), "{err:?}");
    assert!(err.to_string().contains("us-east1-b"), "{err}");
    assert_eq!(
        parse_instance_page(br#"{"unreachables":["zones/x-1-a"],"items":{}}"#),
        Err(ProviderError::Partial {
            unreachable: vec!["x-1-a".into()]
        })
    );
    let (vms, _) = parse_instance_page(br#"{"unreachables":[]}"#).expect("complete");
    assert!(vms.is_empty());
    assert!(matches!(
        parse_instance_page(br#"{"items":{"zones/a-1-b":{"instances":[{"name":"x"}]}}}"#),
        Err(ProviderError::Malformed(_))
    ));
}

fn google(code: u16, reason: Option<&str>, status: Option<&str>) -> Vec<u8> {
    let mut error = json!({ "code": code, "message": "secret-ish text ya29.token" });
    if let Some(reason) = reason {
        error["errors"] = json!([{ "domain": "global", "reason": reason, "message": "m" }]);
    }
    if let Some(status) = status {
        error["status"] = json!(status);
    }
    json!({ "error": error }).to_string().into_bytes()
}

#[test]
fn errors_are_classified() {
    let rejected = |status: u16, reason: &str| ProviderError::Rejected {
        status,
        reason: reason.into(),
    };
    assert_eq!(
        classify(404, &google(404, Some("notFound"), None)),
        ProviderError::NotFound
    );
    assert_eq!(classify(404, b""), ProviderError::NotFound);
    assert_eq!(
        classify(409, &google(409, Some("alreadyExists"), None)),
        ProviderError::AlreadyExists
    );
    assert_eq!(
        classify(
            409,
            &google(409, Some("resourceInUseByAnotherResource"), None)
        ),
        rejected(409, "resourceInUseByAnotherResource")
    );
    let not_ready = classify(400, &google(400, Some("resourceNotReady"), None));
    assert_eq!(not_ready, rejected(400, "resourceNotReady"));
    assert!(not_ready.is_retryable());
    // Quota refusals are throttles, for the caller to pace (3.12 r4).
    let throttled = |quota| ProviderError::Throttled {
        quota,
        retry_after: None,
    };
    let limited = classify(403, &google(403, Some("rateLimitExceeded"), None));
    assert_eq!(limited, throttled(Throttle::Rate));
    assert!(limited.is_retryable());
    let exhausted = classify(429, &google(429, None, Some("RESOURCE_EXHAUSTED")));
    assert_eq!(exhausted, throttled(Throttle::Rate));
    assert_eq!(classify(429, b"not json"), throttled(Throttle::Rate));
    let concurrent = br#"{"error":{"code":403,"errors":[{"reason":"rateLimitExceeded"}],
            "details":[{"@type":"type.googleapis.com/google.rpc.ErrorInfo",
                        "reason":"CONCURRENT_OPERATIONS_QUOTA_EXCEEDED"}]}}"#;
    assert_eq!(
        classify(403, concurrent),
        throttled(Throttle::ConcurrentOperations)
    );
    let scope = classify(
        403,
        &google(
            403,
            Some("insufficientPermissions"),
            Some("PERMISSION_DENIED"),
        ),
    );
    assert_eq!(scope, rejected(403, "insufficientPermissions"));
    assert!(!scope.is_retryable());
    assert_eq!(
        classify(400, &google(400, Some("<script>"), None)),
        rejected(400, "unknown")
    );
    assert_eq!(
        classify(400, b"<html>"),
        ProviderError::Status { status: 400 }
    );
    assert_eq!(
        classify(401, &google(401, Some("authError"), None)),
        ProviderError::Status { status: 401 }
    );
    let unavailable = classify(503, &google(503, Some("backendError"), None));
    assert_eq!(unavailable, ProviderError::Status { status: 503 });
    assert!(unavailable.is_retryable());
    for err in [scope, not_ready, exhausted] {
        let text = err.to_string();
        assert!(!text.contains("ya29") && !text.contains("secret"), "{text}");
    }
}
