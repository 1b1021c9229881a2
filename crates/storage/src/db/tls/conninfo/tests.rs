use super::*;
use tokio_postgres::config::Host;

use super::super::check;
use super::super::hints::hosts;

fn target(url: &str) -> Target {
    split(url).expect("a valid connection string")
}

fn error(url: &str) -> String {
    split(url)
        .expect_err("an invalid connection string")
        .to_string()
}

#[test]
fn absent_parameters_keep_libpq_default_prefer() {
    let t = target("postgres://u:pw@db.example:5432/app");
    assert_eq!(t.rest, "postgres://u:pw@db.example:5432/app");
    assert_eq!(t.mode, SslMode::Prefer);
    assert_eq!(t.root_cert, None);
    let t = target("postgres://u@h/app?application_name=x");
    assert_eq!(t.rest, "postgres://u@h/app?application_name=x");
    assert_eq!(t.mode, SslMode::Prefer);
}

#[test]
fn tls_parameters_are_taken_out_in_any_order() {
    for url in [
        "postgres://u@h/app?sslmode=verify-full&sslrootcert=/etc/ca.pem&connect_timeout=5",
        "postgres://u@h/app?connect_timeout=5&sslrootcert=/etc/ca.pem&sslmode=verify-full",
        "postgres://u@h/app?sslrootcert=/etc/ca.pem&connect_timeout=5&sslmode=verify-full",
    ] {
        let t = target(url);
        assert_eq!(t.rest, "postgres://u@h/app?connect_timeout=5", "{url}");
        assert_eq!(t.mode, SslMode::VerifyFull);
        assert_eq!(t.root_cert, Some(RootCert::File("/etc/ca.pem".into())));
    }
    let t = target("postgresql://u@h/app?sslmode=require");
    assert_eq!(t.rest, "postgresql://u@h/app");
    assert_eq!(t.mode, SslMode::Require);
}

#[test]
fn every_mode_is_read() {
    for (value, mode) in [
        ("disable", SslMode::Disable),
        ("prefer", SslMode::Prefer),
        ("require", SslMode::Require),
        ("verify-ca", SslMode::VerifyCa),
        ("verify-full", SslMode::VerifyFull),
    ] {
        assert_eq!(
            target(&format!(
                "postgres://h/d?sslmode={value}&sslrootcert=/ca.pem"
            ))
            .mode,
            mode
        );
        assert_eq!(mode.to_string(), value);
    }
}

#[test]
fn percent_encoded_values_and_keys_are_decoded() {
    let t = target(
        "postgres://u:p%40ss@h/app?sslrootcert=%2Fsecrets%2Fmy%20ca%2Bbundle.pem\
         &ssl%6Dode=verify%2Dca",
    );
    assert_eq!(
        t.root_cert,
        Some(RootCert::File("/secrets/my ca+bundle.pem".into()))
    );
    assert_eq!(t.mode, SslMode::VerifyCa);
    // The rest, password included, is left as written for tokio-postgres.
    assert_eq!(t.rest, "postgres://u:p%40ss@h/app");
    assert!(error("postgres://h/d?sslrootcert=%zz").contains("percent-encoding"));
}

#[test]
fn a_question_mark_in_the_password_is_not_the_query() {
    let t = target("postgres://u:pa?ss@h/app?sslmode=require");
    assert_eq!(t.rest, "postgres://u:pa?ss@h/app");
    assert_eq!(t.mode, SslMode::Require);
    let config = parse_rest(&t).expect("tokio-postgres reads the rest");
    assert_eq!(config.get_password(), Some(&b"pa?ss"[..]));
    let t = target("postgres://u:pa?ss@h/app");
    assert_eq!(
        (t.rest.as_str(), t.mode),
        ("postgres://u:pa?ss@h/app", SslMode::Prefer)
    );
}

#[test]
fn the_last_occurrence_wins_as_in_libpq() {
    let t = target("postgres://h/d?sslmode=disable&sslmode=verify-full");
    assert_eq!(t.mode, SslMode::VerifyFull);
}

#[test]
fn the_rest_is_what_tokio_postgres_reads() {
    let t = target("postgres://u:secret@db.example:6543/app?sslmode=require&port=7000");
    let config = parse_rest(&t).expect("tokio-postgres reads the rest");
    assert_eq!(config.get_user(), Some("u"));
    assert_eq!(config.get_password(), Some(&b"secret"[..]));
    assert_eq!(config.get_dbname(), Some("app"));
    assert_eq!(config.get_ports(), &[6543, 7000]);
    assert_eq!(
        config.get_ssl_mode(),
        tokio_postgres::config::SslMode::Require
    );
    let t = target("postgres://h/d?sslmode=verify-ca&sslrootcert=/ca.pem");
    assert_eq!(
        parse_rest(&t).expect("config").get_ssl_mode(),
        tokio_postgres::config::SslMode::Require
    );
}

#[test]
fn multi_host_urls_keep_every_host_and_the_session_rule() {
    let t = target("postgres://u@10.0.0.1:5432,10.0.0.2:5433/app?target_session_attrs=read-write");
    assert_eq!(t.mode, SslMode::Prefer);
    let config = parse_rest(&t).expect("tokio-postgres reads the rest");
    assert_eq!(
        config.get_hosts(),
        &[Host::Tcp("10.0.0.1".into()), Host::Tcp("10.0.0.2".into())]
    );
    assert_eq!(config.get_ports(), &[5432, 5433]);
    assert_eq!(
        config.get_target_session_attrs(),
        tokio_postgres::config::TargetSessionAttrs::ReadWrite
    );
    assert_eq!(hosts(&config), "10.0.0.1:5432,10.0.0.2:5433");
    let one_port = parse_rest(&target("host=a,b port=6000 dbname=d")).expect("config");
    assert_eq!(hosts(&one_port), "a:6000,b:6000");
    check("postgres://u@a:1,b:2/d?target_session_attrs=read-write&sslmode=disable")
        .expect("a multi-host URL is accepted");
}

#[test]
fn key_value_strings_are_split_too() {
    let t = target(
        "host=db.example  sslmode = verify-full dbname='my app' \
         sslrootcert='/etc/my ca.pem' password='it\\'s'",
    );
    assert_eq!(t.mode, SslMode::VerifyFull);
    assert_eq!(t.root_cert, Some(RootCert::File("/etc/my ca.pem".into())));
    let config = parse_rest(&t).expect("tokio-postgres reads the rest");
    assert_eq!(config.get_hosts(), &[Host::Tcp("db.example".into())]);
    assert_eq!(config.get_dbname(), Some("my app"));
    assert_eq!(config.get_password(), Some(&b"it's"[..]));
    let t = target("host=h dbname=d");
    assert_eq!(t.mode, SslMode::Prefer);
    assert!(error("host=h sslmode='verify-full").contains("unterminated"));
    assert!(error("host=h sslmode").contains("no `=`"));
}

#[test]
fn unknown_modes_are_refused_by_name() {
    let e = error("postgres://u:hunter2@h/d?sslmode=verify_full");
    assert!(e.contains("sslmode=\"verify_full\" is not one of"), "{e}");
    assert!(!e.contains("hunter2"), "{e}");
    let e = error("postgres://h/d?sslmode=allow");
    assert!(e.contains("sslmode=allow is not supported"), "{e}");
    assert!(error("postgres://h/d?sslmode=").contains("sslmode=\"\""));
}

#[test]
fn unimplemented_tls_parameters_are_refused() {
    for p in [
        "sslcert=/c.pem",
        "sslkey=/k.pem",
        "sslcrl=/crl.pem",
        "sslpassword=x",
        "sslsni=0",
        "ssl_min_protocol_version=TLSv1.3",
    ] {
        let e = error(&format!("postgres://u:hunter2@h/d?{p}"));
        let name = p.split('=').next().expect("name");
        assert!(
            e.contains(&format!("the parameter {name} is not supported")),
            "{e}"
        );
        assert!(!e.contains("hunter2"), "{e}");
    }
    // Values that say what this client does anyway are accepted.
    assert_eq!(
        target("postgres://h/d?sslsni=1&sslcompression=0").rest,
        "postgres://h/d"
    );
}

#[test]
fn system_roots_mean_verify_full() {
    let t = target("postgres://h/d?sslrootcert=system");
    assert_eq!(
        (t.mode, t.root_cert),
        (SslMode::VerifyFull, Some(RootCert::System))
    );
    let e = error("postgres://h/d?sslrootcert=system&sslmode=verify-ca");
    assert!(
        e.contains("sslrootcert=system needs sslmode=verify-full"),
        "{e}"
    );
    assert!(error("postgres://h/d?sslrootcert=").contains("sslrootcert is empty"));
}

#[test]
fn verify_ca_needs_its_own_roots() {
    // Public roots sign anyone's names and verify-ca checks none: refused,
    // in both forms of a connection string, with the fix named.
    for url in [
        "postgres://u:hunter2@h/d?sslmode=verify-ca",
        "host=h user=u password=hunter2 sslmode=verify-ca",
    ] {
        let e = error(url);
        assert!(e.contains("sslmode=verify-ca needs sslrootcert="), "{e}");
        assert!(e.contains("verify-full"), "{e}");
        assert!(!e.contains("hunter2"), "{e}");
    }
    let t = target("postgres://h/d?sslmode=verify-ca&sslrootcert=/etc/ca.pem");
    assert_eq!(t.mode, SslMode::VerifyCa);
}

#[test]
fn only_percent_escapes_are_decoded_and_they_must_be_whole() {
    // libpq's decoding: a `+` is itself, not a space as in a form.
    let t = target("postgres://h/d?sslrootcert=/a+b.pem");
    assert_eq!(t.root_cert, Some(RootCert::File("/a+b.pem".into())));
    assert!(error("postgres://h/d?sslrootcert=/a%4").contains("percent-encoding"));
    assert!(error("postgres://h/d?sslrootcert=/a%ff").contains("not UTF-8"));
}

#[test]
fn replaces_the_database_name() {
    assert_eq!(
        with_database("postgres://u@h:5/postgres", "x"),
        "postgres://u@h:5/x"
    );
    assert_eq!(
        with_database("postgres://u@h:5/db?sslmode=disable", "x"),
        "postgres://u@h:5/x?sslmode=disable"
    );
    assert_eq!(with_database("postgres://u@h:5", "x"), "postgres://u@h:5/x");
}
