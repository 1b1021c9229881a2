//! `bcctl` and lending idle granted slots (contract 3.14), the real binary
//! against the real api-server over HTTP: the grantee's admin lends a grant
//! and stops lending it (`grants lend`, `grants unlend`), a member may not,
//! another tenant's `instances create --interruptible` lands in the lent
//! slot, and the tables show lending, lent hours, interruptible instances
//! and when they will be interrupted.

use serde_json::json;

use crate::support::bcctl::Ctl;
use crate::support::builders::{GrantBuilder, PlatformBuilder};
use crate::support::clock::{HOUR, T0};
use crate::support::fixtures::tenant_with_pool;
use crate::support::gce::FLAVOR;
use crate::support::server::{ROOT_TOKEN, Server};

/// The cell of `column` in the row of a table that holds `row` (columns
/// start where their headers do; a cell may hold spaces).
#[track_caller]
fn cell(table: &str, column: &str, row: &str) -> String {
    let mut lines = table.lines();
    let header = lines.next().expect("a header");
    let start = header
        .find(column)
        .unwrap_or_else(|| panic!("no column {column}: {table}"));
    let after = start + column.len();
    let end = header[after..].find(|c: char| c != ' ').map(|n| after + n);
    let line = lines
        .find(|l| l.contains(row))
        .unwrap_or_else(|| panic!("no row {row}: {table}"));
    let end = end.unwrap_or(line.len()).min(line.len());
    line.get(start..end).unwrap_or_default().trim().to_owned()
}

/// The value of `field` in a `FIELD  VALUE` table (`grants get`).
#[track_caller]
fn field(table: &str, field: &str) -> String {
    table
        .lines()
        .skip(1)
        .find_map(|l| {
            let (k, v) = l.split_once(' ')?;
            (k == field).then(|| v.trim().to_owned())
        })
        .unwrap_or_else(|| panic!("no field {field}: {table}"))
}

/// The grantee's admin lends a grant with bcctl and stops lending it; a
/// member key may not; another tenant's interruptible instance takes the
/// lent slot, and is to be interrupted with the pool's notice once the
/// grant stops lending.
#[tokio::test(flavor = "multi_thread")]
async fn a_grantee_lends_and_unlends_with_bcctl_and_a_borrower_takes_the_slot() {
    let s = Server::start().await;
    s.set_clock(T0).await;
    let p = PlatformBuilder::new()
        .slots(2)
        .managed()
        .lending(json!({ "noticeSeconds": 60 }))
        .build(&s)
        .await;
    let g = GrantBuilder::new(&p).term(T0, T0 + HOUR).create(&s).await;
    let acme = Ctl::new(&s, &p.tenant_token);
    let globex = Ctl::new(&s, &tenant_with_pool(&s, "globex", &p.pool).await);
    let borrow = [
        "--tenant",
        "globex",
        "instances",
        "create",
        "--pool",
        &p.pool,
        "--flavor",
        FLAVOR,
        "--interruptible",
    ];

    // Not lending yet: the list says so, and a borrower finds no slot.
    let list = acme.run(&["--tenant", "acme", "grants", "list"]).await;
    assert_eq!(cell(list.ok(), "LENDING", &g), "no", "{list:?}");
    let none = globex.run(&borrow).await;
    assert_eq!(none.code, 7, "{none:?}");
    assert!(
        none.stderr.contains("CAPACITY_UNAVAILABLE") && none.stderr.contains("no-lent-slot"),
        "{none:?}"
    );

    // A member key of the grantee may not lend.
    let member = Ctl::new(&s, &s.key(&p.tenant_token, "acme", "member", None).await);
    let denied = member
        .run(&["--tenant", "acme", "grants", "lend", &g])
        .await;
    assert_ne!(denied.code, 0, "{denied:?}");
    assert_eq!(denied.code, 5, "{denied:?}");
    assert!(denied.stderr.contains("ACCESS_DENIED"), "{denied:?}");
    assert!(denied.stdout.is_empty(), "{denied:?}");

    // The admin lends: the grant is printed as `grants get` prints it.
    let lent = acme.run(&["--tenant", "acme", "grants", "lend", &g]).await;
    assert!(lent.ok().starts_with("FIELD"), "{lent:?}");
    assert_eq!(field(lent.ok(), "grantId"), g);
    assert_eq!(field(lent.ok(), "lending"), "true", "{lent:?}");
    assert_eq!(field(lent.ok(), "lentSlots"), "0", "{lent:?}");
    let got = acme.run(&["--tenant", "acme", "grants", "get", &g]).await;
    assert_eq!(field(got.ok(), "lending"), "true", "{got:?}");
    assert_eq!(field(got.ok(), "lentSlotHours"), "0.000000", "{got:?}");
    let json = acme
        .run(&["--tenant", "acme", "-o", "json", "grants", "get", &g])
        .await
        .json();
    let api = s
        .call(
            &p.tenant_token,
            "reservationGrants/get",
            json!({ "tenantId": "acme", "grantId": g }),
        )
        .await
        .ok();
    assert_eq!(json, api, "-o json is the API's answer");
    assert_eq!(json["grant"]["lending"], true);
    let list = acme.run(&["--tenant", "acme", "grants", "list"]).await;
    assert_eq!(cell(list.ok(), "LENDING", &g), "yes (0 lent)", "{list:?}");

    // Another tenant's interruptible instance lands in the lent slot.
    let vm = globex.run(&borrow).await.ok().trim().to_owned();
    assert!(vm.starts_with("inst_"), "{vm}");
    let rows = globex
        .run(&["--tenant", "globex", "instances", "list"])
        .await;
    assert_eq!(cell(rows.ok(), "PLACEMENT", &vm), "lent", "{rows:?}");
    assert_eq!(cell(rows.ok(), "GRANT", &vm), g, "{rows:?}");
    assert_eq!(cell(rows.ok(), "INTERRUPTIBLE", &vm), "yes", "{rows:?}");
    assert_eq!(cell(rows.ok(), "INTERRUPT AT", &vm), "", "{rows:?}");
    let one = globex
        .run(&["--tenant", "globex", "instances", "get", &vm])
        .await;
    assert_eq!(field(one.ok(), "placement.kind"), "lent", "{one:?}");
    assert_eq!(field(one.ok(), "interruptible"), "true", "{one:?}");
    let list = acme.run(&["--tenant", "acme", "grants", "list"]).await;
    assert_eq!(cell(list.ok(), "LENDING", &g), "yes (1 lent)", "{list:?}");
    let hours = acme.run(&["--tenant", "acme", "grants", "usage", &g]).await;
    let header = hours.ok().lines().next().unwrap_or_default().to_owned();
    assert!(
        header.contains("LENT") && header.trim_end().ends_with("CREDITED"),
        "{hours:?}"
    );
    assert_eq!(cell(hours.ok(), "LENT", "2030-01-01T00:00:00Z"), "0.000000");

    // The admin stops lending: the grant says so, and the borrower is to be
    // interrupted after the pool's notice.
    let unlent = acme
        .run(&["--tenant", "acme", "grants", "unlend", &g])
        .await;
    assert_eq!(field(unlent.ok(), "lending"), "false", "{unlent:?}");
    let got = acme
        .run(&["--tenant", "acme", "-o", "json", "grants", "get", &g])
        .await
        .json();
    assert_eq!(got["grant"]["lending"], false, "{got}");
    let list = acme.run(&["--tenant", "acme", "grants", "list"]).await;
    assert_eq!(cell(list.ok(), "LENDING", &g), "no", "{list:?}");
    let rows = globex
        .run(&["--tenant", "globex", "instances", "list"])
        .await;
    assert_eq!(
        cell(rows.ok(), "INTERRUPT AT", &vm),
        "2030-01-01T00:01:00Z",
        "{rows:?}"
    );
    let one = globex
        .run(&["--tenant", "globex", "instances", "get", &vm])
        .await;
    assert_eq!(field(one.ok(), "interruptAt"), "2030-01-01T00:01:00Z");
}

/// `pools create --lending-notice` sends `lending` (refused on a ledger
/// pool, as the contract says), a lending pool shows its notice, and the
/// new commands' help has an example.
#[tokio::test(flavor = "multi_thread")]
async fn pools_create_sends_lending_and_the_help_shows_examples() {
    let s = Server::start().await;
    s.set_clock(T0).await;
    let p = PlatformBuilder::new()
        .slots(2)
        .managed()
        .lending(json!({ "noticeSeconds": 60 }))
        .build(&s)
        .await;
    let root = Ctl::new(&s, ROOT_TOKEN);
    let ledger = root
        .run(&[
            "pools",
            "create",
            "--name",
            "ledger",
            "--region",
            "us-central1",
            "--account",
            &p.account,
            "--flavor",
            "n2-standard-4:4:16",
            "--lending-notice",
            "60",
        ])
        .await;
    assert_eq!(ledger.code, 4, "{ledger:?}");
    assert!(
        ledger.stderr.contains("INVALID_INPUT") && ledger.stderr.contains("ledger-pool"),
        "{ledger:?}"
    );
    let pool = root
        .run(&["-o", "json", "pools", "get", &p.pool])
        .await
        .json();
    assert_eq!(pool["pool"]["lending"]["noticeSeconds"], 60, "{pool}");
    for (args, want) in [
        (
            ["grants", "lend", "--help"],
            "bcctl --tenant acme grants lend",
        ),
        (
            ["grants", "unlend", "--help"],
            "bcctl --tenant acme grants unlend",
        ),
        (["instances", "create", "--help"], "--interruptible"),
        (["pools", "create", "--help"], "--lending-notice"),
    ] {
        let help = root.run(&args).await;
        assert!(help.ok().contains(want), "{args:?}: {help:?}");
    }
}
