//! Every answer the suite receives from a documented endpoint is checked
//! against the OpenAPI document the server generates: its status must be one
//! the method documents, and its body must match that response's schema. So
//! the document cannot drift from the server without a test failing.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex};

use serde_json::Value;

static DOC: LazyLock<Value> = LazyLock::new(|| api_server::registry::Registry::new().openapi());

type Key = (String, String, u16);
static VALIDATORS: LazyLock<Mutex<HashMap<Key, Arc<jsonschema::Validator>>>> =
    LazyLock::new(|| Mutex::new(HashMap::new()));

fn validator(method: &str, path: &str, status: u16, schema: &Value) -> Arc<jsonschema::Validator> {
    let key = (method.to_owned(), path.to_owned(), status);
    let mut cache = VALIDATORS.lock().expect("validators");
    cache
        .entry(key)
        .or_insert_with(|| {
            // The response schema, with the document's components beside it
            // so that its `#/components/schemas/...` references resolve.
            let mut root = schema.clone();
            root["components"] = DOC["components"].clone();
            Arc::new(
                jsonschema::draft202012::new(&root)
                    .unwrap_or_else(|e| panic!("{method} {path} {status}: bad schema: {e}")),
            )
        })
        .clone()
}

/// Checks one answer. Paths the document does not describe (an unknown path,
/// a method path called with another HTTP method) are not checked here:
/// their answers are the contract's fixed 404 and 405.
pub fn check(method: &str, path: &str, status: u16, body: &str) {
    let Some(op) = DOC["paths"]
        .get(path)
        .and_then(|p| p.get(method.to_ascii_lowercase()))
    else {
        return;
    };
    let Some(response) = op["responses"].get(status.to_string()) else {
        panic!(
            "{method} {path} answered {status}, which its OpenAPI operation does not document \
             (documented: {:?}); body: {body}",
            op["responses"]
                .as_object()
                .map(|r| r.keys().collect::<Vec<_>>())
        );
    };
    let Some(schema) = response["content"]
        .get("application/json")
        .map(|c| &c["schema"])
    else {
        return;
    };
    let instance: Value = serde_json::from_str(body)
        .unwrap_or_else(|e| panic!("{method} {path} {status}: body is not JSON ({e}): {body}"));
    let v = validator(method, path, status, schema);
    let errors: Vec<String> = v
        .iter_errors(&instance)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{method} {path} {status}: the body does not match the documented schema: {errors:?}\n\
         body: {body}"
    );
}

#[test]
fn the_check_refuses_an_undocumented_status_and_a_body_off_its_schema() {
    let refused = |method: &'static str, path: &'static str, status: u16, body: &'static str| {
        std::panic::catch_unwind(|| check(method, path, status, body)).is_err()
    };
    // pools.list cannot answer NOT_FOUND, so it does not document 404.
    assert!(refused("POST", "/api/compute/pools/list", 404, "{}"));
    // A grant without its fields is not a Grant.
    assert!(refused(
        "POST",
        "/api/compute/reservationGrants/get",
        200,
        r#"{"grant": {}}"#
    ));
    // An error code outside the status's documented codes.
    let conflict = r#"{"error": {"code": "CONFLICT", "message": "x", "details": {}}}"#;
    assert!(refused("POST", "/api/compute/instances/get", 409, conflict));
    // And what the document allows passes.
    let not_found = r#"{"error": {"code": "NOT_FOUND", "message": "x", "details": {}}}"#;
    check("POST", "/api/compute/instances/get", 404, not_found);
    check("POST", "/api/compute/pools/list", 200, r#"{"items": []}"#);
}
