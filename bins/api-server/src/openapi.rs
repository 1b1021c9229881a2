//! The OpenAPI 3.1 document, rendered from the method registry: every
//! method with its typed request and response, the codes it can answer and
//! an example; the unauthenticated GET endpoints; the shared schemas.
//! Served at `GET /api/openapi.json` (built once per process,
//! [`Registry::openapi_json`]) and printed by `api-server openapi`.

use schemars::generate::{Contract, SchemaSettings};
use serde_json::{Value, json};

use crate::error::Code;
use crate::registry::Registry;

impl Registry {
    /// The OpenAPI 3.1 document: every method with its typed request and
    /// response, the codes it can answer, an example; the unauthenticated
    /// GET endpoints; the shared schemas.
    pub fn openapi(&self) -> Value {
        let settings = SchemaSettings::draft2020_12().with(|s| {
            s.definitions_path = "/components/schemas".into();
            s.meta_schema = None;
            s.contract = Contract::Serialize;
        });
        let mut generator = settings.into_generator();
        let mut paths = serde_json::Map::new();
        for m in self.methods() {
            let mut responses = serde_json::Map::new();
            responses.insert(
                "200".to_owned(),
                json!({
                    "description": "success",
                    "content": { "application/json": {
                        "schema": (m.endpoint.output)(&mut generator),
                    } },
                }),
            );
            for (status, codes) in by_status(&m.codes()) {
                responses.insert(status.to_string(), error_response(&codes));
            }
            paths.insert(
                m.path(),
                json!({ "post": {
                    "operationId": m.name(),
                    "summary": m.summary,
                    "tags": [m.module],
                    "security": [{ "bearer": [] }],
                    "x-kind": m.kind.as_str(),
                    "x-permission": m.permission.as_str(),
                    "x-scope": m.scope().as_str(),
                    "x-service-module": m.service_module,
                    "x-phase": m.phase,
                    "x-status": m.status,
                    "requestBody": {
                        "required": true,
                        "content": { "application/json": {
                            "schema": m.input().doc(),
                            "example": m.example,
                        } },
                    },
                    "responses": responses,
                } }),
            );
        }
        for (path, id, summary, response) in unauthenticated() {
            paths.insert(
                path.to_owned(),
                json!({ "get": {
                    "operationId": id,
                    "summary": summary,
                    "tags": ["system"],
                    "security": [],
                    "responses": response,
                } }),
            );
        }
        let mut schemas = generator.take_definitions(true);
        schemas.insert("Error".to_owned(), error_schema());
        json!({
            "openapi": "3.1.0",
            "info": {
                "title": "Compute control plane: reservation grants and quotas",
                "version": env!("CARGO_PKG_VERSION"),
                "description": "Every method is a POST of a JSON object to \
                    /api/compute/{module}/{method}, authenticated with an API key as a bearer \
                    token. Instants are epoch milliseconds (UTC) as 64-bit integers.",
            },
            "servers": [
                { "url": "http://127.0.0.1:8080", "description": "`just run` on this machine" },
                { "url": "/", "description": "the server that serves this document" },
            ],
            "paths": paths,
            "components": {
                "securitySchemes": { "bearer": { "type": "http", "scheme": "bearer" } },
                "schemas": schemas,
            },
        })
    }
}

/// Groups codes by their HTTP status, in status order.
fn by_status(codes: &[Code]) -> Vec<(u16, Vec<Code>)> {
    let mut out: Vec<(u16, Vec<Code>)> = Vec::new();
    for &c in codes {
        match out.iter_mut().find(|(s, _)| *s == c.http_status()) {
            Some((_, list)) => list.push(c),
            None => out.push((c.http_status(), vec![c])),
        }
    }
    out.sort_by_key(|(s, _)| *s);
    out
}

fn error_response(codes: &[Code]) -> Value {
    let names: Vec<&str> = codes.iter().map(|c| c.as_str()).collect();
    let content = json!({ "application/json": { "schema": {
        "allOf": [{ "$ref": "#/components/schemas/Error" }],
        "properties": { "error": { "properties": { "code": { "enum": names } } } },
    } } });
    if codes.contains(&Code::RateLimited) {
        json!({
            "description": names.join(" or "),
            "headers": { "Retry-After": {
                "description": "With RATE_LIMITED: whole seconds to wait before sending \
                                again (details.retryAfterMs, rounded up).",
                "schema": { "type": "integer", "minimum": 1 },
            } },
            "content": content,
        })
    } else {
        json!({ "description": names.join(" or "), "content": content })
    }
}

fn error_schema() -> Value {
    let all: Vec<&str> = Code::ALL.iter().map(|c| c.as_str()).collect();
    json!({
        "type": "object",
        "description": "The error envelope (contract 1.2).",
        "required": ["error"],
        "properties": { "error": {
            "type": "object",
            "required": ["code", "message", "details"],
            "properties": {
                "code": { "type": "string", "enum": all },
                "message": { "type": "string" },
                "details": {
                    "type": "object",
                    "description": "For INVALID_INPUT: field and reason (missing, type, \
                        length, pattern, range, enum, unknown, ...), and the constraint.",
                },
            },
        } },
    })
}

/// The GET endpoints that need no key.
fn unauthenticated() -> Vec<(&'static str, &'static str, &'static str, Value)> {
    let status = |values: &[&str]| {
        json!({
            "type": "object",
            "required": ["status"],
            "properties": { "status": { "type": "string", "enum": values } },
        })
    };
    let ok = |schema: Value| {
        json!({ "200": {
            "description": "success",
            "content": { "application/json": { "schema": schema } },
        } })
    };
    let mut readyz = ok(status(&["ready"]));
    if let Some(responses) = readyz.as_object_mut() {
        responses.insert(
            "503".to_owned(),
            json!({
                "description": "the database is unreachable",
                "content": { "application/json": { "schema": status(&["not ready"]) } },
            }),
        );
    }
    vec![
        (
            "/healthz",
            "healthz",
            "Liveness: the process serves.",
            ok(status(&["ok"])),
        ),
        (
            "/readyz",
            "readyz",
            "Readiness: the database answers.",
            readyz,
        ),
        (
            "/metrics",
            "metrics",
            "Prometheus metrics: the 0.0.4 text format, or OpenMetrics text when the \
             `Accept` header asks for it. Not served here when the server runs with \
             `BC_METRICS_LISTEN` (404): then on that address.",
            json!({
                "200": {
                    "description": "success",
                    "content": {
                        (telemetry::TEXT_CONTENT_TYPE): { "schema": { "type": "string" } },
                        (telemetry::CONTENT_TYPE): { "schema": { "type": "string" } },
                    },
                },
                "404": {
                    "description": "served on BC_METRICS_LISTEN instead",
                    "content": { "application/json": {
                        "schema": { "$ref": "#/components/schemas/Error" },
                    } },
                },
            }),
        ),
        (
            "/api/openapi.json",
            "openapi",
            "This document.",
            ok(json!({ "type": "object" })),
        ),
        (
            "/api/compute/methods",
            "methods",
            "Every method with its permission, scope, phase and status.",
            ok(json!({
                "type": "object",
                "required": ["items"],
                "properties": { "items": { "type": "array", "items": {
                    "type": "object",
                    "required": ["name", "module", "method", "serviceModule", "kind",
                        "permission", "scope", "phase", "status"],
                    "properties": {
                        "name": { "type": "string" },
                        "module": { "type": "string" },
                        "method": { "type": "string" },
                        "serviceModule": { "type": "string" },
                        "kind": { "type": "string", "enum": ["read", "mutation"] },
                        "permission": { "type": "string" },
                        "scope": { "type": "string" },
                        "phase": { "type": "string" },
                        "status": { "type": "string" },
                    },
                } } },
            })),
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_success_response_is_typed_and_every_error_documented() {
        let doc = Registry::new().openapi();
        let schemas = doc["components"]["schemas"].as_object().expect("schemas");
        for m in Registry::new().methods() {
            let op = &doc["paths"][m.path()]["post"];
            let ok = &op["responses"]["200"]["content"]["application/json"]["schema"];
            let target = ok["$ref"]
                .as_str()
                .unwrap_or_else(|| panic!("{}: untyped", m.name()));
            let name = target.trim_start_matches("#/components/schemas/");
            let schema = &schemas[name];
            assert_eq!(schema["type"], "object", "{}", m.name());
            assert!(
                schema["properties"]
                    .as_object()
                    .is_some_and(|p| !p.is_empty())
            );
            for code in m.codes() {
                let status = code.http_status().to_string();
                let schema = &op["responses"][&status]["content"]["application/json"]["schema"];
                let listed = &schema["properties"]["error"]["properties"]["code"]["enum"];
                assert!(
                    listed
                        .as_array()
                        .is_some_and(|l| l.contains(&json!(code.as_str()))),
                    "{}: {} not documented under {status}",
                    m.name(),
                    code.as_str()
                );
            }
        }
    }

    #[test]
    fn epoch_milliseconds_are_documented_as_int64() {
        let doc = Registry::new().openapi();
        let grant = &doc["components"]["schemas"]["Grant"]["properties"];
        for field in ["startsAt", "endsAt", "createdAt", "meteredThrough"] {
            assert_eq!(grant[field]["format"], "int64", "{field}");
        }
    }

    #[test]
    fn the_committed_openapi_document_is_the_generated_one() {
        let committed: Value =
            serde_json::from_str(include_str!("../../../docs/api/openapi.json")).expect("json");
        assert!(
            committed == Registry::new().openapi(),
            "docs/api/openapi.json is stale: run `just docs` and commit it"
        );
    }
}
