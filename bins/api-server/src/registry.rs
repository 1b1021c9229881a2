//! The method registry: every method as data. Routing, authorization,
//! `GET /api/compute/methods` and the OpenAPI document are generated from it,
//! so a method cannot exist without its permission and schema.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use iam_check::{Permission, ScopeKind, TenantRule};
use serde_json::{Value, json};
use storage::Error;
use storage::tenancy::Authenticated;

use crate::app::App;
use crate::schema::{Field, object_schema};

/// Whether a method changes state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Reads only.
    Read,
    /// Changes state.
    Mutation,
}

impl Kind {
    /// `read` or `mutation`.
    pub fn as_str(self) -> &'static str {
        match self {
            Kind::Read => "read",
            Kind::Mutation => "mutation",
        }
    }
}

/// One authorized, validated call of a method.
pub struct Call {
    /// Shared state.
    pub app: Arc<App>,
    /// The authenticated caller.
    pub caller: Authenticated,
    /// The validated input.
    pub input: Value,
    /// `module.method`.
    pub name: String,
}

/// A successful answer, already serialized as a JSON object.
#[derive(Debug, Clone)]
pub struct Reply(pub String);

impl From<Value> for Reply {
    fn from(v: Value) -> Reply {
        Reply(v.to_string())
    }
}

/// What a handler returns.
pub type HandlerFuture = Pin<Box<dyn Future<Output = Result<Reply, Error>> + Send>>;
/// A method's handler.
pub type Handler = fn(Call) -> HandlerFuture;

/// Wraps an `async fn(Call) -> Result<Value | Reply, Error>` as a [`Handler`].
macro_rules! handler {
    ($f:path) => {
        |call| Box::pin(async move { $f(call).await.map($crate::registry::Reply::from) })
    };
}
pub(crate) use handler;

/// A registered method.
pub struct Method {
    /// API namespace (`reservationGrants`).
    pub module: &'static str,
    /// Method name (`create`).
    pub method: &'static str,
    /// The source documents' module (`vps`, `capacity`, `iam`, `billing`, `events`).
    pub service_module: &'static str,
    /// Read or mutation.
    pub kind: Kind,
    /// The permission decided.
    pub permission: Permission,
    /// How the tenant pre-check treats `tenantId`.
    pub tenant_rule: TenantRule,
    /// Phase (`v1.0`).
    pub phase: &'static str,
    /// Status (`registered`).
    pub status: &'static str,
    /// One line on what it does.
    pub summary: &'static str,
    /// Input fields (including `tenantId`).
    pub fields: Vec<Field>,
    /// The handler.
    pub handler: Handler,
}

impl Method {
    /// `module.method`.
    pub fn name(&self) -> String {
        format!("{}.{}", self.module, self.method)
    }

    /// The scope the permission is decided on.
    pub fn scope(&self) -> ScopeKind {
        self.permission.scope()
    }

    /// `POST` path.
    pub fn path(&self) -> String {
        format!("/api/compute/{}/{}", self.module, self.method)
    }

    /// The entry of `GET /api/compute/methods`.
    pub fn describe(&self) -> Value {
        json!({
            "name": self.name(),
            "module": self.module,
            "method": self.method,
            "serviceModule": self.service_module,
            "kind": self.kind.as_str(),
            "permission": self.permission.as_str(),
            "scope": self.scope().as_str(),
            "phase": self.phase,
            "status": self.status,
        })
    }
}

/// All methods, by path.
pub struct Registry {
    methods: Vec<Method>,
    by_path: HashMap<String, usize>,
}

impl Registry {
    /// Builds the registry from every handler module.
    pub fn new() -> Registry {
        let mut methods = Vec::new();
        methods.extend(crate::handlers::tenancy::methods());
        methods.extend(crate::handlers::capacity::methods());
        methods.extend(crate::handlers::accounts::methods());
        methods.extend(crate::handlers::accounts::reservation_methods());
        methods.extend(crate::handlers::grants::methods());
        methods.extend(crate::handlers::instances::methods());
        methods.extend(crate::handlers::system::methods());
        let by_path = methods
            .iter()
            .enumerate()
            .map(|(i, m)| (m.path(), i))
            .collect();
        Registry { methods, by_path }
    }

    /// The method served at `path`.
    pub fn get(&self, path: &str) -> Option<&Method> {
        self.by_path.get(path).map(|&i| &self.methods[i])
    }

    /// Every method, in registration order.
    pub fn methods(&self) -> &[Method] {
        &self.methods
    }

    /// `GET /api/compute/methods`.
    pub fn list(&self) -> Value {
        json!({ "items": self.methods.iter().map(Method::describe).collect::<Vec<_>>() })
    }

    /// The OpenAPI 3.1 document.
    pub fn openapi(&self) -> Value {
        let mut paths = serde_json::Map::new();
        for m in &self.methods {
            let mut errors = serde_json::Map::new();
            for (status, text) in [
                ("400", "INVALID_INPUT"),
                ("401", "UNAUTHENTICATED"),
                ("403", "ACCESS_DENIED"),
                ("404", "NOT_FOUND"),
                ("409", "CONFLICT, INVALID_STATE or CAPACITY_UNAVAILABLE"),
                ("413", "PAYLOAD_TOO_LARGE"),
                ("429", "QUOTA_EXCEEDED"),
                ("500", "INTERNAL"),
                ("503", "UNAVAILABLE"),
            ] {
                errors.insert(
                    status.to_owned(),
                    json!({
                        "description": text,
                        "content": {
                            "application/json": {
                                "schema": { "$ref": "#/components/schemas/Error" }
                            }
                        },
                    }),
                );
            }
            errors.insert(
                "200".to_owned(),
                json!({
                    "description": "success",
                    "content": { "application/json": { "schema": { "type": "object" } } },
                }),
            );
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
                        "content": {
                            "application/json": { "schema": object_schema(&m.fields) }
                        },
                    },
                    "responses": errors,
                } }),
            );
        }
        json!({
            "openapi": "3.1.0",
            "info": {
                "title": "Compute control plane: reservation grants and quotas",
                "version": env!("CARGO_PKG_VERSION"),
            },
            "paths": paths,
            "components": {
                "securitySchemes": { "bearer": { "type": "http", "scheme": "bearer" } },
                "schemas": { "Error": {
                    "type": "object",
                    "required": ["error"],
                    "properties": { "error": {
                        "type": "object",
                        "required": ["code", "message", "details"],
                        "properties": {
                            "code": { "type": "string" },
                            "message": { "type": "string" },
                            "details": { "type": "object" },
                        },
                    } },
                } },
            },
        })
    }
}

impl Default for Registry {
    fn default() -> Self {
        Registry::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_method_is_unique_and_takes_the_acting_tenant() {
        let r = Registry::new();
        let mut names: Vec<String> = r.methods().iter().map(Method::name).collect();
        let before = names.len();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), before, "duplicate method names");
        for m in r.methods() {
            let first = m.fields.first().expect("fields");
            assert_eq!(
                (first.name, first.required),
                ("tenantId", true),
                "{}",
                m.name()
            );
            if m.scope() == ScopeKind::ProviderAccount {
                assert!(
                    m.fields.iter().any(|f| f.name == "accountId" && f.required),
                    "{} needs accountId",
                    m.name()
                );
            }
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
