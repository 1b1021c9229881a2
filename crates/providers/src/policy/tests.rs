use super::*;

use std::collections::HashMap;

use crate::ProviderError;

const ROOT: AccountOwner = AccountOwner::Root;
const TENANT: AccountOwner = AccountOwner::Tenant;

fn policy(vars: &[(&str, &str)]) -> ProviderPolicy {
    try_policy(vars).expect("a valid policy")
}

fn try_policy(vars: &[(&str, &str)]) -> Result<ProviderPolicy, PolicyError> {
    let vars: HashMap<String, String> = vars
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    ProviderPolicy::from_lookup(|name| vars.get(name).cloned())
}

fn config(endpoint: &str, credentials: Credentials) -> GceConfig {
    GceConfig {
        project: "my-project".into(),
        endpoint: endpoint.into(),
        credentials,
    }
}

fn with_credentials(credentials: Credentials) -> GceConfig {
    config(DEFAULT_ENDPOINT, credentials)
}

/// `(field, reason)` of a refusal, or `None` if allowed.
fn verdict(
    p: &ProviderPolicy,
    c: &GceConfig,
    owner: AccountOwner,
) -> Option<(String, &'static str)> {
    p.check(c, owner)
        .err()
        .map(|e| (e.field, e.reason.as_str()))
}

fn credential_refused() -> Option<(String, &'static str)> {
    Some(("config.credentials".into(), "credential-not-allowed"))
}

fn endpoint_refused() -> Option<(String, &'static str)> {
    Some(("config.endpoint".into(), "endpoint-not-allowed"))
}

fn message(p: &ProviderPolicy, c: &GceConfig, owner: AccountOwner) -> String {
    p.check(c, owner).expect_err("refused").to_string()
}

#[test]
fn unset_variables_give_the_default_policy() {
    let p = policy(&[]);
    assert_eq!(p, ProviderPolicy::default());
    assert_eq!(p.endpoints.len(), 1, "the default endpoint parses");
    assert_eq!(
        p.endpoints[0].to_string(),
        "https://compute.googleapis.com:443"
    );
    assert!(p.credential_env.is_empty());
    assert_eq!(p.credential_dir, None);
    // Empty values: no endpoints, no variables, no directory.
    let empty = policy(&[
        (ENDPOINTS_VAR, ""),
        (CREDENTIAL_ENV_VAR, " "),
        (CREDENTIAL_DIR_VAR, ""),
    ]);
    assert!(empty.endpoints.is_empty());
    assert!(empty.credential_env.is_empty());
    assert_eq!(empty.credential_dir, None);
}

#[test]
fn from_env_reads_the_process_environment() {
    assert_eq!(
        ProviderPolicy::from_env(),
        ProviderPolicy::from_lookup(|name| std::env::var(name).ok())
    );
}

#[test]
fn debug_shows_the_lists() {
    let p = policy(&[
        (ENDPOINTS_VAR, "https://a.example, http://b.example:*"),
        (CREDENTIAL_ENV_VAR, "GCE_TOKEN,GCE_*"),
    ]);
    assert_eq!(
        format!("{p:?}"),
        "ProviderPolicy { endpoints: [\"https://a.example:443\", \"http://b.example:*\"], \
         credential_env: [\"GCE_TOKEN\", \"GCE_*\"], credential_dir: None }"
    );
}

#[test]
fn owner_of_an_account() {
    assert_eq!(AccountOwner::of("root", "root"), ROOT);
    assert_eq!(AccountOwner::of("acme", "root"), TENANT);
    assert_eq!(AccountOwner::of("ops", "ops"), ROOT);
}

#[test]
fn none_is_allowed_for_every_owner_under_any_policy() {
    let d = dirs();
    for p in [
        ProviderPolicy::default(),
        policy(&[
            (
                ENDPOINTS_VAR,
                "https://compute.googleapis.com, http://x.example:*",
            ),
            (CREDENTIAL_ENV_VAR, "GCE_*"),
        ]),
        d.policy.clone(),
    ] {
        for owner in [ROOT, TENANT] {
            assert_eq!(
                verdict(&p, &with_credentials(Credentials::None), owner),
                None,
                "{owner:?} {p:?}"
            );
        }
    }
}

#[test]
fn secret_references_are_allowed_for_every_owner() {
    let c = with_credentials(Credentials::Secret("gce-key".into()));
    for p in [
        ProviderPolicy::default(),
        policy(&[(CREDENTIAL_ENV_VAR, "GCE_*")]),
    ] {
        for owner in [ROOT, TENANT] {
            assert_eq!(verdict(&p, &c, owner), None, "{owner:?}");
        }
    }
}

#[test]
fn adc_is_root_only() {
    let c = with_credentials(Credentials::Adc);
    let p = ProviderPolicy::default();
    assert_eq!(verdict(&p, &c, TENANT), credential_refused());
    assert!(message(&p, &c, TENANT).contains("root tenant's accounts only"));
    assert_eq!(verdict(&p, &c, ROOT), None);
}

#[test]
fn a_tenant_key_may_post_only_to_google_or_a_listed_origin() {
    let p = policy(&[(
        ENDPOINTS_VAR,
        "https://compute.googleapis.com,http://127.0.0.1:*",
    )]);
    assert!(
        p.check_token_uri(crate::auth::GOOGLE_TOKEN_URI, TENANT)
            .is_ok()
    );
    assert!(
        p.check_token_uri("http://127.0.0.1:8085/token", TENANT)
            .is_ok()
    );
    for refused in [
        "http://169.254.169.254/token",
        "https://oauth2.googleapis.com.evil.example/token",
        "http://localhost:8085/token",
        "file:///etc/passwd",
    ] {
        assert!(p.check_token_uri(refused, TENANT).is_err(), "{refused}");
    }
    // Root's keys are the platform's own: any http(s) URL.
    assert!(p.check_token_uri("http://10.0.0.5/token", ROOT).is_ok());
    assert!(p.check_token_uri("file:///etc/passwd", ROOT).is_err());
}

#[test]
fn env_references_are_root_only_and_must_be_listed() {
    let listed = policy(&[(CREDENTIAL_ENV_VAR, "GCE_TOKEN, OTHER_TOKEN")]);
    let token = with_credentials(Credentials::Env("GCE_TOKEN".into()));
    let unlisted = with_credentials(Credentials::Env("BC_BOOTSTRAP_TOKEN".into()));
    assert_eq!(verdict(&listed, &token, ROOT), None);
    assert_eq!(
        verdict(
            &listed,
            &with_credentials(Credentials::Env("OTHER_TOKEN".into())),
            ROOT
        ),
        None
    );
    assert_eq!(verdict(&listed, &token, TENANT), credential_refused());
    assert!(message(&listed, &token, TENANT).contains("root tenant's accounts only"));
    assert_eq!(verdict(&listed, &unlisted, ROOT), credential_refused());
    assert_eq!(verdict(&listed, &unlisted, TENANT), credential_refused());
    // Exact names match exactly.
    for near in ["GCE_TOKEN_2", "GCE_TOKE", "XGCE_TOKEN"] {
        let c = with_credentials(Credentials::Env(near.into()));
        assert_eq!(verdict(&listed, &c, ROOT), credential_refused(), "{near}");
        assert!(message(&listed, &c, ROOT).contains("not listed in BC_CREDENTIAL_ENV"));
    }
    // The default lists none.
    assert_eq!(
        verdict(&ProviderPolicy::default(), &token, ROOT),
        credential_refused()
    );
}

#[test]
fn env_prefix_patterns() {
    let p = policy(&[(CREDENTIAL_ENV_VAR, "GCE_*,BC_*")]);
    for allowed in ["GCE_", "GCE_TOKEN", "GCE_TOKEN_PROD_2", "BC_GCE_TOKEN"] {
        let c = with_credentials(Credentials::Env(allowed.into()));
        assert_eq!(verdict(&p, &c, ROOT), None, "{allowed}");
        assert_eq!(verdict(&p, &c, TENANT), credential_refused(), "{allowed}");
    }
    // A prefix never reaches the platform's own secrets.
    for refused in [
        "GCE",
        "GCETOKEN",
        "XGCE_TOKEN",
        "BC_BOOTSTRAP_TOKEN",
        "BC_SECRETS_KEY",
        "BC_SECRETS_OLD_KEYS",
    ] {
        let c = with_credentials(Credentials::Env(refused.into()));
        assert_eq!(verdict(&p, &c, ROOT), credential_refused(), "{refused}");
    }
    let everything_but = policy(&[(CREDENTIAL_ENV_VAR, "D*")]);
    assert_eq!(
        verdict(
            &everything_but,
            &with_credentials(Credentials::Env("DATABASE_URL".into())),
            ROOT
        ),
        credential_refused()
    );
}

#[test]
fn bad_credential_env_is_a_start_up_error_without_the_value() {
    for (value, item) in [
        ("*", 1),
        ("GCE_TOKEN, *", 2),
        ("gce_token", 1),
        ("A-B", 1),
        ("1ABC", 1),
        ("GCE*X", 1),
        ("A,,BC_BOOTSTRAP_TOKEN", 2),
        ("DATABASE_URL", 1),
        ("ya29.a0AfH6SMBx3", 1),
    ] {
        let err = try_policy(&[(CREDENTIAL_ENV_VAR, value)]).expect_err(value);
        assert_eq!(err.variable, CREDENTIAL_ENV_VAR, "{value}");
        let text = err.to_string();
        assert!(text.starts_with("BC_CREDENTIAL_ENV: item "), "{text}");
        assert!(text.contains(&format!("item {item} ")), "{value}: {text}");
        for part in value.split(',').map(str::trim).filter(|p| p.len() > 1) {
            assert!(!text.contains(part), "{text} names {part}");
        }
    }
}

/// A credential directory with a token, a sub-directory and a file outside.
struct Dirs {
    _root: tempfile::TempDir,
    dir: PathBuf,
    outside: PathBuf,
    policy: ProviderPolicy,
}

fn dirs() -> Dirs {
    let root = tempfile::tempdir().expect("temp dir");
    let dir = root.path().join("creds");
    std::fs::create_dir_all(dir.join("sub")).expect("mkdir");
    std::fs::write(dir.join("token"), "tok-123\n").expect("write");
    std::fs::write(dir.join("sub").join("token"), "tok-sub").expect("write");
    let outside = root.path().join("outside-secret");
    std::fs::write(&outside, "the server's secret").expect("write");
    let dir_var = dir.to_str().expect("utf-8 path").to_owned();
    let policy = policy(&[(CREDENTIAL_DIR_VAR, &dir_var)]);
    Dirs {
        _root: root,
        dir,
        outside,
        policy,
    }
}

fn file(path: impl Into<PathBuf>) -> GceConfig {
    with_credentials(Credentials::File(path.into()))
}

#[test]
fn file_references_are_root_only_and_must_stay_inside_the_dir() {
    let d = dirs();
    let token = file(d.dir.join("token"));
    assert_eq!(verdict(&d.policy, &token, ROOT), None);
    assert_eq!(
        verdict(&d.policy, &file(d.dir.join("sub/token")), ROOT),
        None
    );
    assert_eq!(
        verdict(&d.policy, &file(d.dir.join("sub/../token")), ROOT),
        None
    );
    assert_eq!(verdict(&d.policy, &file(d.dir.join("./token")), ROOT), None);
    assert_eq!(verdict(&d.policy, &token, TENANT), credential_refused());
    assert!(message(&d.policy, &token, TENANT).contains("root tenant's accounts only"));
    // Without BC_CREDENTIAL_DIR nothing is allowed.
    assert_eq!(
        verdict(&ProviderPolicy::default(), &token, ROOT),
        credential_refused()
    );
    assert!(message(&ProviderPolicy::default(), &token, ROOT).contains("BC_CREDENTIAL_DIR"));
    // Outside, the directory itself, a sibling with the same prefix.
    let sibling = d.dir.with_file_name("creds2");
    std::fs::create_dir_all(&sibling).expect("mkdir");
    std::fs::write(sibling.join("token"), "x").expect("write");
    for refused in [
        d.outside.clone(),
        d.dir.clone(),
        sibling.join("token"),
        PathBuf::from("/etc/hostname"),
        PathBuf::from("relative/token"),
    ] {
        assert_eq!(
            verdict(&d.policy, &file(&refused), ROOT),
            credential_refused(),
            "{}",
            refused.display()
        );
        assert_eq!(
            verdict(&d.policy, &file(&refused), TENANT),
            credential_refused()
        );
    }
}

#[test]
fn dot_dot_does_not_escape_the_dir() {
    let d = dirs();
    for escape in [
        d.dir.join("../outside-secret"),
        d.dir.join("sub/../../outside-secret"),
        d.dir.join("../creds/../outside-secret"),
        d.dir.join("../../../../../../../../etc/hostname"),
        // Does not exist: judged lexically, still outside.
        d.dir.join("../not-yet"),
    ] {
        assert_eq!(
            verdict(&d.policy, &file(&escape), ROOT),
            credential_refused(),
            "{}",
            escape.display()
        );
    }
}

#[cfg(unix)]
#[test]
fn symlinks_do_not_escape_the_dir() {
    use std::os::unix::fs::symlink;
    let d = dirs();
    symlink(&d.outside, d.dir.join("link-out")).expect("symlink");
    symlink(d.outside.parent().expect("parent"), d.dir.join("dir-out")).expect("symlink");
    symlink(d.dir.join("token"), d.dir.join("link-in")).expect("symlink");
    assert_eq!(
        verdict(&d.policy, &file(d.dir.join("link-out")), ROOT),
        credential_refused()
    );
    assert_eq!(
        verdict(&d.policy, &file(d.dir.join("dir-out/outside-secret")), ROOT),
        credential_refused()
    );
    // A file not there yet under a symlinked directory that leads out.
    assert_eq!(
        verdict(&d.policy, &file(d.dir.join("dir-out/not-yet")), ROOT),
        credential_refused()
    );
    assert_eq!(verdict(&d.policy, &file(d.dir.join("link-in")), ROOT), None);
    assert_eq!(
        verdict(&d.policy, &file(d.dir.join("not-yet")), ROOT),
        None,
        "a file not there yet is judged by its path"
    );
}

#[test]
fn reading_a_file_rechecks_the_resolved_path() {
    let d = dirs();
    assert_eq!(
        d.policy.read_credential_file(&d.dir.join("token")),
        Ok("tok-123\n".to_owned())
    );
    assert_eq!(
        d.policy
            .read_credential_file(&d.dir.join("sub/../sub/token")),
        Ok("tok-sub".to_owned())
    );
    let escape = d
        .policy
        .read_credential_file(&d.dir.join("../outside-secret"));
    assert!(
        matches!(escape, Err(ProviderError::NotAllowed(_))),
        "{escape:?}"
    );
    let missing = d
        .policy
        .read_credential_file(&d.dir.join("missing"))
        .expect_err("missing");
    assert!(
        matches!(missing, ProviderError::Credentials(_)),
        "{missing:?}"
    );
    assert!(
        missing.to_string().contains("cannot read token file"),
        "{missing}"
    );
    let directory = d.policy.read_credential_file(&d.dir.join("sub"));
    assert!(
        matches!(directory, Err(ProviderError::Credentials(_))),
        "{directory:?}"
    );
    let big = d.dir.join("big");
    std::fs::write(&big, vec![b'a'; 64 * 1024 + 1]).expect("write");
    let err = d.policy.read_credential_file(&big).expect_err("too big");
    assert!(err.to_string().contains("larger than"), "{err}");
    let none = ProviderPolicy::default().read_credential_file(&d.dir.join("token"));
    assert!(
        matches!(none, Err(ProviderError::NotAllowed(_))),
        "{none:?}"
    );
}

#[cfg(unix)]
#[test]
fn a_symlink_planted_after_the_check_is_refused_at_read() {
    use std::os::unix::fs::symlink;
    let d = dirs();
    let later = d.dir.join("later");
    // At create the path does not exist, and is inside.
    assert_eq!(verdict(&d.policy, &file(&later), ROOT), None);
    // Then it appears as a symlink to a file outside.
    symlink(&d.outside, &later).expect("symlink");
    assert_eq!(
        verdict(&d.policy, &file(&later), ROOT),
        credential_refused()
    );
    let err = d.policy.read_credential_file(&later).expect_err("outside");
    assert!(matches!(err, ProviderError::NotAllowed(_)), "{err:?}");
    assert!(!err.to_string().contains("the server's secret"), "{err}");
}

#[test]
fn bad_credential_dir_is_a_start_up_error_without_the_value() {
    let root = tempfile::tempdir().expect("temp dir");
    let a_file = root.path().join("plain-file-xyz");
    std::fs::write(&a_file, "x").expect("write");
    let missing = root.path().join("missing-dir-xyz");
    for (value, why) in [
        ("relative/dir-xyz".to_owned(), "not an absolute path"),
        (missing.display().to_string(), "cannot be resolved"),
        (a_file.display().to_string(), "not a directory"),
        ("/".to_owned(), "root directory"),
    ] {
        let err = try_policy(&[(CREDENTIAL_DIR_VAR, &value)]).expect_err(&value);
        assert_eq!(err.variable, CREDENTIAL_DIR_VAR);
        let text = err.to_string();
        assert!(text.contains(why), "{value}: {text}");
        assert!(!text.contains("xyz"), "{text}");
    }
}

#[test]
fn root_may_name_any_http_endpoint() {
    let p = ProviderPolicy::default();
    for endpoint in [
        "https://compute.googleapis.com",
        "http://127.0.0.1:8085",
        "http://169.254.169.254",
        "http://localhost:1/gce",
        "https://proxy.example.com/gce/v1",
    ] {
        assert_eq!(
            verdict(&p, &config(endpoint, Credentials::None), ROOT),
            None,
            "{endpoint}"
        );
    }
    // Not http(s) at all (a config built by hand, past `from_json`).
    assert_eq!(
        verdict(&p, &config("ftp://example.com", Credentials::None), ROOT),
        endpoint_refused()
    );
    assert_eq!(
        verdict(&p, &config("nonsense", Credentials::None), ROOT),
        endpoint_refused()
    );
}

#[test]
fn tenant_endpoints_must_be_listed_origins() {
    let check = |p: &ProviderPolicy, endpoint: &str| {
        verdict(p, &config(endpoint, Credentials::None), TENANT)
    };
    let default = ProviderPolicy::default();
    for ok in [
        "https://compute.googleapis.com",
        "https://compute.googleapis.com:443",
        "https://COMPUTE.googleapis.com",
        "https://compute.googleapis.com/some/path",
    ] {
        assert_eq!(check(&default, ok), None, "{ok}");
    }
    for refused in [
        "http://compute.googleapis.com",
        "https://compute.googleapis.com:8443",
        "https://compute.googleapis.com.evil.example",
        "https://evil.example",
        "http://127.0.0.1:8085",
        "http://169.254.169.254",
    ] {
        assert_eq!(check(&default, refused), endpoint_refused(), "{refused}");
    }
    assert!(
        message(
            &default,
            &config("https://evil.example", Credentials::None),
            TENANT
        )
        .contains("not listed in BC_PROVIDER_ENDPOINTS")
    );

    let listed = policy(&[(
        ENDPOINTS_VAR,
        "http://gce.internal.example:8080, https://Proxy.Example.com:*, \
         http://127.0.0.1:8085,http://[::1]:*, http://localhost:*",
    )]);
    for ok in [
        "http://gce.internal.example:8080",
        "http://GCE.internal.example:8080/compute",
        "https://proxy.example.com",
        "https://proxy.example.com:1234/x",
        "http://127.0.0.1:8085",
        "http://[::1]:9",
        "http://localhost:1",
    ] {
        assert_eq!(check(&listed, ok), None, "{ok}");
    }
    for refused in [
        "http://gce.internal.example",
        "http://gce.internal.example:8081",
        "https://gce.internal.example:8080",
        "http://proxy.example.com",
        "http://127.0.0.1:8086",
        "http://127.0.0.2:8085",
        "https://compute.googleapis.com",
    ] {
        assert_eq!(check(&listed, refused), endpoint_refused(), "{refused}");
    }
    // An empty list allows no tenant endpoint, and root's are not concerned.
    let none = policy(&[(ENDPOINTS_VAR, "")]);
    assert_eq!(check(&none, DEFAULT_ENDPOINT), endpoint_refused());
    assert_eq!(
        verdict(&none, &config(DEFAULT_ENDPOINT, Credentials::None), ROOT),
        None
    );
}

#[test]
fn bad_provider_endpoints_is_a_start_up_error_without_the_value() {
    for (value, item) in [
        ("compute.googleapis.com", 1),
        ("ftp://files.example", 1),
        ("https://a.example, https://b.example/gce", 2),
        ("https://user:pw@a.example", 1),
        ("https://a.example?key=abc", 1),
        ("https://a.example#frag", 1),
        ("https://a.example:8443:*", 1),
        ("https://a.example:port", 1),
        ("https://", 1),
    ] {
        let err = try_policy(&[(ENDPOINTS_VAR, value)]).expect_err(value);
        assert_eq!(err.variable, ENDPOINTS_VAR);
        let text = err.to_string();
        assert!(
            text.starts_with(&format!(
                "BC_PROVIDER_ENDPOINTS: item {item} is not an origin"
            )),
            "{value}: {text}"
        );
        for part in ["example", "googleapis", "pw", "abc"] {
            assert!(!text.contains(part), "{text}");
        }
    }
}

#[test]
fn credentials_are_checked_before_the_endpoint() {
    let p = policy(&[(CREDENTIAL_ENV_VAR, "GCE_TOKEN")]);
    let both_bad = config("https://evil.example", Credentials::Env("GCE_TOKEN".into()));
    assert_eq!(verdict(&p, &both_bad, TENANT), credential_refused());
    let endpoint_bad = config("https://evil.example", Credentials::None);
    assert_eq!(verdict(&p, &endpoint_bad, TENANT), endpoint_refused());
}

#[test]
fn the_guard_exempts_hosts_listed_by_ip_or_as_localhost() {
    let p = policy(&[(
        ENDPOINTS_VAR,
        "http://127.0.0.1:8085, http://[::1]:*, http://localhost:*, http://evil.example:*",
    )]);
    for exempt in ["127.0.0.1", "[::1]", "localhost", "LOCALHOST"] {
        assert!(p.guard_exempt(exempt), "{exempt}");
    }
    // A listed name other than localhost is still guarded: DNS may move it.
    for guarded in [
        "evil.example",
        "127.0.0.2",
        "10.0.0.1",
        "[::2]",
        "localhost.",
    ] {
        assert!(!p.guard_exempt(guarded), "{guarded}");
    }
    assert!(!ProviderPolicy::default().guard_exempt("localhost"));
    assert!(!ProviderPolicy::default().guard_exempt("127.0.0.1"));
}
