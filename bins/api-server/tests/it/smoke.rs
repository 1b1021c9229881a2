use serde_json::json;

use crate::support::server::Server;

#[tokio::test(flavor = "multi_thread")]
async fn serves_health_and_a_first_call() {
    let s = Server::start().await;
    assert_eq!(s.get_text("/healthz").await.0, 200);
    assert_eq!(s.get_text("/readyz").await.0, 200);
    let tenants = s.root("tenants/list", json!({})).await.ok();
    assert_eq!(tenants["items"][0]["tenantId"], "root");
    let status = s.stop().await;
    assert!(status.success(), "{status:?}");
}
