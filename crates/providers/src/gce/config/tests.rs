use super::*;

fn err(v: Value) -> (String, &'static str) {
    let e = GceConfig::from_json(&v).expect_err("config should be refused");
    (e.field, e.reason.as_str())
}

fn pair(field: &str, reason: &'static str) -> (String, &'static str) {
    (field.to_owned(), reason)
}

#[test]
fn minimal_config_gets_the_default_endpoint() {
    let c = GceConfig::from_json(&json!({ "project": "my-project", "credentials": "none" }))
        .expect("valid");
    assert_eq!(
        c,
        GceConfig {
            project: "my-project".into(),
            endpoint: DEFAULT_ENDPOINT.into(),
            credentials: Credentials::None,
        }
    );
}

#[test]
fn full_config_round_trips() {
    let v = json!({
        "project": "prod-123456",
        "endpoint": "http://127.0.0.1:8085/",
        "credentials": "file:/var/run/secrets/gce/token",
    });
    let c = GceConfig::from_json(&v).expect("valid");
    assert_eq!(c.endpoint, "http://127.0.0.1:8085");
    assert_eq!(
        c.credentials,
        Credentials::File("/var/run/secrets/gce/token".into())
    );
    assert_eq!(GceConfig::from_json(&c.to_json()).expect("valid"), c);
    let e = GceConfig::from_json(
        &json!({ "project": "prod-123456", "credentials": "env:GCE_TOKEN_1" }),
    )
    .expect("valid");
    assert_eq!(e.credentials, Credentials::Env("GCE_TOKEN_1".into()));
    assert_eq!(e.to_json()["credentials"], "env:GCE_TOKEN_1");
    for (reference, parsed) in [
        ("secret:gce-key", Credentials::Secret("gce-key".into())),
        ("secret:a", Credentials::Secret("a".into())),
        ("adc", Credentials::Adc),
        ("none", Credentials::None),
    ] {
        let c =
            GceConfig::from_json(&json!({ "project": "prod-123456", "credentials": reference }))
                .expect(reference);
        assert_eq!(c.credentials, parsed);
        assert_eq!(c.credentials.to_string(), reference);
        assert_eq!(c.to_json()["credentials"], reference);
        assert_eq!(GceConfig::from_json(&c.to_json()).expect("valid"), c);
    }
    let longest = format!("secret:a{}", "-9".repeat(31));
    let c = GceConfig::from_json(&json!({ "project": "prod-123456", "credentials": longest }))
        .expect("a 63-character name");
    assert_eq!(c.credentials.to_string(), longest);
}

#[test]
fn config_must_be_an_object() {
    assert_eq!(err(json!("project")), pair("config", "type"));
    assert_eq!(err(json!(null)), pair("config", "type"));
}

#[test]
fn unknown_keys_are_refused() {
    assert_eq!(
        err(json!({ "project": "my-project", "credentials": "none", "zone": "x" })),
        pair("config.zone", "unknown")
    );
}

#[test]
fn project_rules() {
    assert_eq!(
        err(json!({ "credentials": "none" })),
        pair("config.project", "missing")
    );
    assert_eq!(
        err(json!({ "project": 12, "credentials": "none" })),
        pair("config.project", "type")
    );
    for bad in [
        "short",
        "My-project",
        "1project",
        "my-project-",
        "my_project",
        "my project x",
    ] {
        assert_eq!(
            err(json!({ "project": bad, "credentials": "none" })),
            pair("config.project", "pattern"),
            "{bad}"
        );
    }
    let long = format!("p{}", "a".repeat(30));
    assert_eq!(
        err(json!({ "project": long, "credentials": "none" })),
        pair("config.project", "length")
    );
    for good in ["abcdef", "my-project-1", "a23456789012345678901234567890"] {
        assert!(
            GceConfig::from_json(&json!({ "project": good, "credentials": "none" })).is_ok(),
            "{good}"
        );
    }
}

#[test]
fn endpoint_rules() {
    let with = |e: Value| json!({ "project": "my-project", "endpoint": e, "credentials": "none" });
    assert_eq!(err(with(json!(8085))), pair("config.endpoint", "type"));
    assert_eq!(err(with(json!(null))), pair("config.endpoint", "type"));
    for bad in [
        "compute.googleapis.com",
        "ftp://compute.googleapis.com",
        "https://",
        "https://compute.googleapis.com/?alt=json",
        "https://compute.googleapis.com/#x",
        "not a url",
    ] {
        assert_eq!(
            err(with(json!(bad))),
            pair("config.endpoint", "pattern"),
            "{bad}"
        );
    }
    assert_eq!(
        err(with(json!("https://user:hunter2@compute.googleapis.com"))),
        pair("config.endpoint", "secret-value")
    );
    assert_eq!(
        err(with(json!("https://compute.googleapis.com/?key=abc"))),
        pair("config.endpoint", "secret-value")
    );
    let long = format!("https://example.com/{}", "a".repeat(ENDPOINT_MAX));
    assert_eq!(err(with(json!(long))), pair("config.endpoint", "length"));
    let ok = GceConfig::from_json(&with(json!("https://proxy.example.com/gce/"))).expect("valid");
    assert_eq!(ok.endpoint, "https://proxy.example.com/gce");
}

#[test]
fn credentials_rules() {
    let with = |c: Value| json!({ "project": "my-project", "credentials": c });
    assert_eq!(
        err(json!({ "project": "my-project" })),
        pair("config.credentials", "missing")
    );
    assert_eq!(err(with(json!(true))), pair("config.credentials", "type"));
    assert_eq!(err(with(json!(null))), pair("config.credentials", "type"));
    for bad in [
        "env:",
        "env:lower",
        "env:1ABC",
        "env:A-B",
        "file:",
        "file:relative/path",
        "file:/",
        "secret:",
        "secret:Gce-key",
        "secret:1key",
        "secret:-key",
        "secret:gce_key",
        "secret:gce.key",
        "secret:gce key",
    ] {
        assert_eq!(
            err(with(json!(bad))),
            pair("config.credentials", "pattern"),
            "{bad}"
        );
    }
    let long = format!("env:{}", "A".repeat(ENV_NAME_MAX + 1));
    assert_eq!(err(with(json!(long))), pair("config.credentials", "length"));
    let long = format!("secret:a{}", "-9".repeat(31) + "x");
    assert_eq!(
        err(with(json!(long))),
        pair("config.credentials", "pattern")
    );
    // Anything that is not a reference is refused as a would-be secret.
    for not_a_reference in [
        "hunter2",
        "NONE",
        "ENV:TOKEN",
        "",
        "token:abc",
        "ADC",
        "adc:x",
        "SECRET:key",
    ] {
        assert_eq!(
            err(with(json!(not_a_reference))),
            pair("config.credentials", "secret-value"),
            "{not_a_reference}"
        );
    }
}

#[test]
fn secret_values_are_refused_in_any_field() {
    let sa_key = json!({
        "type": "service_account",
        "project_id": "my-project",
        "private_key_id": "0123456789abcdef",
        "private_key": "-----BEGIN PRIVATE KEY-----\nMIIEvQ\n-----END PRIVATE KEY-----\n",
        "client_email": "x@my-project.iam.gserviceaccount.com",
    });
    let with = |c: Value| json!({ "project": "my-project", "credentials": c });
    for secret in [
        json!(sa_key.to_string()),
        sa_key.clone(),
        json!("-----BEGIN RSA PRIVATE KEY-----\nabc\n-----END RSA PRIVATE KEY-----"),
        json!("ya29.a0AfH6SMBx3"),
        json!("Zk3q9Vb7Lm2Xp8Rt5Wn4Yc6Hd1Gf0Js9Ke7Ua3Ob2Ci5Pz"),
        json!("Bearer abcdef"),
    ] {
        assert_eq!(
            err(with(secret.clone())),
            pair("config.credentials", "secret-value"),
            "{secret}"
        );
    }
    // A secret in the project or endpoint, or under an unknown key.
    assert_eq!(
        err(json!({ "project": "ya29.a0AfH6SMBx3", "credentials": "none" })),
        pair("config.project", "secret-value")
    );
    assert_eq!(
        err(json!({
            "project": "my-project",
            "endpoint": concat!(
                "https://compute.googleapis.com/",
                "Zk3q9Vb7Lm2Xp8Rt5Wn4Yc6Hd1Gf0Js9Ke7Ua3Ob2Ci5Pz"
            ),
            "credentials": "none",
        })),
        pair("config.endpoint", "secret-value")
    );
    assert_eq!(
        err(json!({ "project": "my-project", "credentials": "none", "token": "ya29.abc" })),
        pair("config.token", "secret-value")
    );
}

#[test]
fn error_display_names_field_and_reason_only() {
    let e = GceConfig::from_json(&json!({ "project": "my-project", "credentials": "ya29.secret" }))
        .expect_err("refused");
    assert_eq!(e.to_string(), "config.credentials: secret-value");
    let e = ConfigError::not_allowed(
        "config.credentials",
        ConfigReason::CredentialNotAllowed,
        "adc is not available yet".into(),
    );
    assert_eq!(
        e.to_string(),
        "config.credentials: credential-not-allowed (adc is not available yet)"
    );
}

#[test]
fn reason_spellings() {
    for (reason, spelled) in [
        (ConfigReason::Missing, "missing"),
        (ConfigReason::Type, "type"),
        (ConfigReason::Pattern, "pattern"),
        (ConfigReason::Length, "length"),
        (ConfigReason::Unknown, "unknown"),
        (ConfigReason::SecretValue, "secret-value"),
        (ConfigReason::CredentialNotAllowed, "credential-not-allowed"),
        (ConfigReason::EndpointNotAllowed, "endpoint-not-allowed"),
    ] {
        assert_eq!(reason.as_str(), spelled);
        assert_eq!(reason.to_string(), spelled);
    }
}

#[test]
fn schema_lists_the_fields() {
    let s = config_schema();
    assert_eq!(s["required"], json!(["project", "credentials"]));
    assert_eq!(s["properties"]["endpoint"]["default"], DEFAULT_ENDPOINT);
    let pattern = s["properties"]["credentials"]["pattern"]
        .as_str()
        .expect("a pattern");
    for form in [
        "env:",
        "file:/",
        "secret:[a-z][a-z0-9-]{0,62}",
        "|adc|",
        "none",
    ] {
        assert!(pattern.contains(form), "{pattern} lacks {form}");
    }
    let description = s["properties"]["credentials"]["description"]
        .as_str()
        .expect("a description");
    for word in [
        "secret:NAME",
        "adc",
        "BC_CREDENTIAL_ENV",
        "BC_CREDENTIAL_DIR",
        "root",
    ] {
        assert!(description.contains(word), "{description} lacks {word}");
    }
}
