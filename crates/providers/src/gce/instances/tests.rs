use super::*;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::gce::{Credentials, GceConfig, GceProviderOptions};
use crate::policy::{AccountOwner, ProviderAccess, ProviderPolicy};

const RID: &str = "6f1c2b3a-0d4e-4f5a-8b6c-7d8e9f0a1b2c";

fn provider(endpoint: &str, owner: AccountOwner) -> GceProvider {
    GceProvider::new(
        GceConfig {
            project: "my-project".into(),
            endpoint: endpoint.into(),
            credentials: Credentials::None,
        },
        GceProviderOptions {
            connect_timeout: Duration::from_millis(500),
            retry_delay: Duration::from_millis(5),
            page_size: Some(2),
            ..GceProviderOptions::default()
        },
        ProviderAccess::new(owner, Arc::new(ProviderPolicy::default())),
    )
    .expect("client")
}

fn spec() -> VmSpec {
    VmSpec {
        name: "bc-01jd".into(),
        zone: "us-central1-a".into(),
        machine_type: "n2-standard-4".into(),
        labels: BTreeMap::from([("bc-managed".into(), "true".into())]),
        reservation: None,
        image: "projects/debian-cloud/global/images/family/debian-12".into(),
        disk_gb: 10,
        network: "global/networks/default".into(),
        subnetwork: None,
        service_account: None,
    }
}

/// One request as the server read it.
#[derive(Debug)]
struct Seen {
    head: String,
    body: Vec<u8>,
}

impl Seen {
    fn request_line(&self) -> &str {
        self.head.lines().next().unwrap_or_default()
    }

    fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|line| {
            let (key, value) = line.split_once(':')?;
            key.eq_ignore_ascii_case(name)
                .then(|| value.trim().to_owned())
        })
    }
}

/// Serves one request per answer, in order, on one connection each; answers
/// what they asked.
async fn serve(listener: TcpListener, answers: Vec<(u16, String)>) -> Vec<Seen> {
    let mut seen = Vec::new();
    for (status, body) in answers {
        let (mut socket, _) = tokio::time::timeout(Duration::from_secs(5), listener.accept())
            .await
            .expect("a connection within 5 s")
            .expect("accept");
        let mut data = Vec::new();
        let mut buf = [0u8; 4096];
        let head_end = loop {
            if let Some(at) = data.windows(4).position(|w| w == b"\r\n\r\n") {
                break at + 4;
            }
            let n = socket.read(&mut buf).await.expect("read");
            assert!(n > 0, "the client closed before sending its request");
            data.extend_from_slice(&buf[..n]);
        };
        let head = String::from_utf8_lossy(&data[..head_end]).into_owned();
        let length: usize = head
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse().ok())?
            })
            .unwrap_or(0);
        while data.len() < head_end + length {
            let n = socket.read(&mut buf).await.expect("read body");
            assert!(n > 0, "the client closed before sending its body");
            data.extend_from_slice(&buf[..n]);
        }
        seen.push(Seen {
            head,
            body: data[head_end..head_end + length].to_vec(),
        });
        let response = format!(
            "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
             connection: close\r\n\r\n{body}",
            body.len()
        );
        socket.write_all(response.as_bytes()).await.expect("write");
    }
    seen
}

async fn listener() -> (TcpListener, String) {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    (listener, format!("http://127.0.0.1:{port}"))
}

fn operation(status: &str) -> String {
    serde_json::json!({ "kind": "compute#operation", "name": "operation-1-a", "status": status })
        .to_string()
}

#[tokio::test]
async fn create_posts_the_body_with_its_request_id() {
    let (listener, endpoint) = listener().await;
    let p = provider(&endpoint, AccountOwner::Root);
    let spec = spec();
    let (op, seen) = tokio::join!(
        p.create_vm(&spec, RID),
        serve(listener, vec![(200, operation("RUNNING"))])
    );
    let op = op.expect("operation");
    assert_eq!(op.name, "operation-1-a");
    assert_eq!(op.zone, "us-central1-a");
    assert_eq!(op.status, crate::OperationStatus::Running);
    let [create] = seen.as_slice() else {
        panic!("one request: {seen:?}");
    };
    assert_eq!(
        create.request_line(),
        format!(
            "POST /compute/v1/projects/my-project/zones/us-central1-a/instances\
             ?requestId={RID} HTTP/1.1"
        )
    );
    assert_eq!(
        create.header("content-type").as_deref(),
        Some("application/json")
    );
    assert_eq!(create.header("authorization"), None);
    let body: serde_json::Value = serde_json::from_slice(&create.body).expect("JSON body");
    assert_eq!(body, vm_wire::create_body(&spec));
}

#[tokio::test]
async fn stop_start_and_delete_name_the_vm_and_retry_a_lost_answer() {
    let (listener, endpoint) = listener().await;
    let p = provider(&endpoint, AccountOwner::Root);
    let run = async {
        let stop = p.stop_vm("us-central1-a", "bc-1", RID).await;
        let start = p.start_vm("us-central1-a", "bc-1", RID).await;
        let delete = p.delete_vm("us-central1-a", "bc-1", RID).await;
        (stop, start, delete)
    };
    let answers = vec![
        (200, operation("DONE")),
        (
            503,
            r#"{"error":{"code":503,"errors":[{"reason":"backendError"}]}}"#.into(),
        ),
        (200, operation("PENDING")),
        (200, operation("RUNNING")),
    ];
    let ((stop, start, delete), seen) = tokio::join!(run, serve(listener, answers));
    assert_eq!(stop.expect("stop").status, crate::OperationStatus::Done);
    assert_eq!(
        start.expect("start").status,
        crate::OperationStatus::Pending
    );
    assert_eq!(
        delete.expect("delete").status,
        crate::OperationStatus::Running
    );
    let path = "/compute/v1/projects/my-project/zones/us-central1-a/instances/bc-1";
    let lines: Vec<&str> = seen.iter().map(Seen::request_line).collect();
    assert_eq!(
        lines,
        [
            format!("POST {path}/stop?requestId={RID} HTTP/1.1"),
            format!("POST {path}/start?requestId={RID} HTTP/1.1"),
            format!("POST {path}/start?requestId={RID} HTTP/1.1"),
            format!("DELETE {path}?requestId={RID} HTTP/1.1"),
        ]
    );
    // A POST without a body still says so (Google wants a Content-Length).
    assert_eq!(seen[0].header("content-length").as_deref(), Some("0"));
}

#[tokio::test]
async fn reads_and_their_refusals() {
    let (listener, endpoint) = listener().await;
    let p = provider(&endpoint, AccountOwner::Root);
    let run = async {
        let missing = p.get_vm("us-central1-a", "bc-1").await;
        let gone = p.get_operation("us-central1-a", "operation-9").await;
        let taken = p.create_vm(&spec(), RID).await;
        let page = p.list_installation_vms("0f3a_b-9").await;
        (missing, gone, taken, page)
    };
    let not_found = r#"{"error":{"code":404,"errors":[{"reason":"notFound"}]}}"#;
    let taken = r#"{"error":{"code":409,"errors":[{"reason":"alreadyExists"}]}}"#;
    let page1 = r#"{"items":{"zones/us-central1-a":{"instances":[
        {"name":"bc-1","status":"RUNNING","labels":{"bc-managed":"true"}}]}},
        "nextPageToken":"p/2"}"#;
    let page2 = r#"{"items":{"zones/us-central1-b":{"instances":[
        {"name":"bc-2","status":"TERMINATED"}]}}}"#;
    let answers = vec![
        (404, not_found.into()),
        (404, not_found.into()),
        (409, taken.into()),
        (200, page1.into()),
        (200, page2.into()),
    ];
    let ((missing, gone, taken, page), seen) = tokio::join!(run, serve(listener, answers));
    assert_eq!(missing, Ok(None));
    assert_eq!(gone, Err(ProviderError::NotFound));
    assert_eq!(taken, Err(ProviderError::AlreadyExists));
    let vms = page.expect("listing");
    let names: Vec<(&str, &str)> = vms
        .iter()
        .map(|vm| (vm.name.as_str(), vm.zone.as_str()))
        .collect();
    assert_eq!(
        names,
        [("bc-1", "us-central1-a"), ("bc-2", "us-central1-b")]
    );
    let list = "/compute/v1/projects/my-project/aggregated/instances\
                ?filter=labels.bc-managed%3Dtrue+AND+labels.bc-installation%3D0f3a_b-9\
                &maxResults=2";
    assert_eq!(seen[3].request_line(), format!("GET {list} HTTP/1.1"));
    assert_eq!(
        seen[4].request_line(),
        format!("GET {list}&pageToken=p%2F2 HTTP/1.1")
    );
    assert_eq!(
        seen[1].request_line(),
        "GET /compute/v1/projects/my-project/zones/us-central1-a/operations/operation-9 HTTP/1.1"
    );
}

#[tokio::test]
async fn bad_names_and_internal_tenant_endpoints_are_refused_before_connecting() {
    let (listener, endpoint) = listener().await;
    let root = provider(&endpoint, AccountOwner::Root);
    let invalid = ProviderError::Rejected {
        status: 400,
        reason: "invalid".into(),
    };
    assert_eq!(
        root.get_vm("us-central1-a", "../../x").await,
        Err(invalid.clone())
    );
    assert_eq!(
        root.stop_vm("us-central1-a/instances", "bc-1", RID).await,
        Err(invalid.clone())
    );
    assert_eq!(
        root.get_operation("us-central1-a", "").await,
        Err(invalid.clone())
    );
    assert_eq!(
        root.delete_vm("us-central1-a", "bc-1", "not-a-uuid").await,
        Err(invalid.clone())
    );
    let nil = "00000000-0000-0000-0000-000000000000";
    assert_eq!(root.create_vm(&spec(), nil).await, Err(invalid.clone()));
    // The installation id goes into the listing's filter: a label value only.
    let too_long = "a".repeat(64);
    for installation in [
        "",
        "a b",
        "a OR labels.x=y",
        "Prod",
        "a\"",
        too_long.as_str(),
    ] {
        assert_eq!(
            root.list_installation_vms(installation).await,
            Err(invalid.clone()),
            "{installation}"
        );
    }
    let tenant = provider(&endpoint, AccountOwner::Tenant);
    let err = tenant
        .create_vm(&spec(), RID)
        .await
        .expect_err("an internal endpoint");
    assert!(matches!(err, ProviderError::NotAllowed(_)), "{err:?}");
    assert!(matches!(
        tenant.list_installation_vms("abc").await,
        Err(ProviderError::NotAllowed(_))
    ));
    let accepted = tokio::time::timeout(Duration::from_millis(200), listener.accept()).await;
    assert!(accepted.is_err(), "something connected: {accepted:?}");
}
