//! The method registry: every method as data. Routing, authorization,
//! `GET /api/compute/methods` and the OpenAPI document (rendered in
//! [`crate::openapi`]) are generated from it, so a method cannot exist
//! without its permission and schema.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use iam_check::{Permission, ScopeKind, TenantRule};
use schemars::{JsonSchema, Schema, SchemaGenerator};
use serde::Serialize;
use serde_json::{Value, json};
use storage::ops::tenancy::Authenticated;

use crate::app::App;
use crate::error::{ApiError, Code};
use crate::schema::{Input, InputSchema, parse};

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
    /// The request's instant, read with the authentication.
    pub now: i64,
    /// The tenant the call acts in (its `tenantId`, parsed once) and root.
    pub actor: storage::Actor,
    /// The validated input.
    pub input: Value,
    /// `module.method`.
    pub name: String,
    /// What the handler tells the audit trail (a replay).
    pub audit: Arc<crate::audit::Marks>,
    /// The connection the request authenticated on, handed to the handler's
    /// first [`Call::conn`]: one pool checkout per request.
    pub held: std::sync::Mutex<Option<storage::db::Conn>>,
}

/// A successful answer, already serialized as a JSON object.
#[derive(Debug, Clone)]
pub struct Reply(pub String);

/// What a handler returns.
pub type HandlerFuture = Pin<Box<dyn Future<Output = Result<Reply, ApiError>> + Send>>;
/// A method's handler, on the raw validated call.
pub type Handler = Arc<dyn Fn(Call) -> HandlerFuture + Send + Sync>;

/// A method's input and output types, as the registry keeps them: the input
/// type's compiled schema (validation and request schema), the response
/// schema, and the handler that receives the typed input and returns the
/// typed output.
pub struct Endpoint {
    /// The input type's schema, `tenantId` first.
    pub input: &'static InputSchema,
    /// The success response's schema.
    pub output: fn(&mut SchemaGenerator) -> Schema,
    /// Parses a body as the input type (the registry tests run it on every
    /// example).
    pub parse: fn(&Value) -> Result<(), ApiError>,
    /// The handler.
    pub handler: Handler,
}

fn output_schema<O: JsonSchema>(generator: &mut SchemaGenerator) -> Schema {
    generator.subschema_for::<O>()
}

fn parse_only<I: Input>(body: &Value) -> Result<(), ApiError> {
    parse::<I>(body).map(drop)
}

/// The [`Endpoint`] of `async fn(Call, I) -> Result<O, ApiError>`.
pub fn endpoint<I, O, F, Fut>(f: F) -> Endpoint
where
    I: Input,
    O: Serialize + JsonSchema,
    F: Fn(Call, I) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<O, ApiError>> + Send + 'static,
{
    Endpoint {
        input: InputSchema::of::<I>(),
        output: output_schema::<O>,
        parse: parse_only::<I>,
        handler: Arc::new(move |call: Call| -> HandlerFuture {
            match parse::<I>(&call.input) {
                Ok(input) => {
                    let answer = f(call, input);
                    Box::pin(async move { Ok(Reply(serde_json::to_string(&answer.await?)?)) })
                }
                Err(e) => Box::pin(async move { Err(e) }),
            }
        }),
    }
}

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
    /// Input and output types and the handler.
    pub endpoint: Endpoint,
    /// The codes the method can answer beyond those every method can
    /// (`INVALID_INPUT`, `UNAUTHENTICATED`, `ACCESS_DENIED`,
    /// `PAYLOAD_TOO_LARGE`, `RATE_LIMITED`, `INTERNAL`, `UNAVAILABLE`).
    pub errors: &'static [Code],
    /// An example request body.
    pub example: Value,
}

/// The codes every method can answer: bad input, authentication, the
/// decision, the body limit, the caller's request rate, a bug, an
/// unreachable database.
pub const COMMON_ERRORS: [Code; 7] = [
    Code::InvalidInput,
    Code::Unauthenticated,
    Code::AccessDenied,
    Code::PayloadTooLarge,
    Code::RateLimited,
    Code::Internal,
    Code::Unavailable,
];

/// What the methods of one source-document module share: its name, the phase
/// they are in and the codes they answer unless a method says otherwise.
#[derive(Debug, Clone, Copy)]
pub struct Service {
    /// The module (`vps`, `capacity`, `iam`, `billing`, `events`).
    pub name: &'static str,
    /// Phase (`v1.0`).
    pub phase: &'static str,
    /// Codes beyond [`COMMON_ERRORS`].
    pub errors: &'static [Code],
}

impl Service {
    /// The method `module.method` of this service: the tenant pre-check is
    /// [`TenantRule::Acting`] and the example `{"tenantId": "acme"}` unless
    /// [`Method::tenant_rule`] and [`Method::example`] say otherwise.
    pub fn method(
        &self,
        module: &'static str,
        method: &'static str,
        kind: Kind,
        permission: Permission,
        summary: &'static str,
        endpoint: Endpoint,
    ) -> Method {
        Method {
            module,
            method,
            service_module: self.name,
            kind,
            permission,
            tenant_rule: TenantRule::Acting,
            phase: self.phase,
            status: "registered",
            summary,
            endpoint,
            errors: self.errors,
            example: json!({ "tenantId": "acme" }),
        }
    }
}

impl Method {
    /// The method's input schema, `tenantId` first.
    pub fn input(&self) -> &'static InputSchema {
        self.endpoint.input
    }

    /// The same method with another tenant pre-check.
    pub fn tenant_rule(self, tenant_rule: TenantRule) -> Method {
        Method {
            tenant_rule,
            ..self
        }
    }

    /// The same method in another phase.
    pub fn phase(self, phase: &'static str) -> Method {
        Method { phase, ..self }
    }

    /// The same method answering also `errors`.
    pub fn errors(self, errors: &'static [Code]) -> Method {
        Method { errors, ..self }
    }

    /// The same method with an example request.
    pub fn example(self, example: Value) -> Method {
        Method { example, ..self }
    }

    /// Every code the method can answer, in status order.
    pub fn codes(&self) -> Vec<Code> {
        let mut codes: Vec<Code> = COMMON_ERRORS.iter().chain(self.errors).copied().collect();
        codes.sort();
        codes.dedup();
        codes
    }

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
    /// `GET /api/openapi.json`'s body, built at its first request (contract
    /// 1.7 r4: once per process, never per request).
    openapi_body: OnceLock<Bytes>,
    /// `GET /api/compute/methods`' body, likewise.
    list_body: OnceLock<Bytes>,
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
        methods.extend(crate::handlers::secrets::methods());
        methods.extend(crate::handlers::audit::methods());
        methods.extend(crate::handlers::system::methods());
        methods.extend(crate::handlers::views::methods());
        methods.extend(crate::handlers::webhooks::methods());
        let by_path = methods
            .iter()
            .enumerate()
            .map(|(i, m)| (m.path(), i))
            .collect();
        Registry {
            methods,
            by_path,
            openapi_body: OnceLock::new(),
            list_body: OnceLock::new(),
        }
    }

    /// The method served at `path`.
    pub fn get(&self, path: &str) -> Option<&Method> {
        self.by_path.get(path).and_then(|&i| self.methods.get(i))
    }

    /// Every method, in registration order.
    pub fn methods(&self) -> &[Method] {
        &self.methods
    }

    /// `GET /api/openapi.json`'s body: [`Registry::openapi`] serialized
    /// once per process.
    pub fn openapi_json(&self) -> Bytes {
        self.openapi_body
            .get_or_init(|| Bytes::from(self.openapi().to_string()))
            .clone()
    }

    /// `GET /api/compute/methods`' body: [`Registry::list`] serialized once
    /// per process.
    pub fn list_json(&self) -> Bytes {
        self.list_body
            .get_or_init(|| Bytes::from(self.list().to_string()))
            .clone()
    }

    /// `GET /api/compute/methods`.
    pub fn list(&self) -> Value {
        json!({ "items": self.methods.iter().map(Method::describe).collect::<Vec<_>>() })
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

    /// The documents anyone may GET are built once: every request after
    /// the first shares the same bytes, equal to a fresh build.
    #[test]
    fn the_open_documents_are_built_once_per_process() {
        let r = Registry::new();
        let (first, second) = (r.openapi_json(), r.openapi_json());
        assert_eq!(
            first.as_ptr(),
            second.as_ptr(),
            "the document was built again"
        );
        assert_eq!(first, Bytes::from(r.openapi().to_string()));
        let (first, second) = (r.list_json(), r.list_json());
        assert_eq!(first.as_ptr(), second.as_ptr(), "the list was built again");
        assert_eq!(first, Bytes::from(r.list().to_string()));
    }

    #[test]
    fn every_method_is_unique_and_takes_the_acting_tenant() {
        let r = Registry::new();
        let mut names: Vec<String> = r.methods().iter().map(Method::name).collect();
        let before = names.len();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), before, "duplicate method names");
        for m in r.methods() {
            let members = m.input().members();
            let first = members.first().expect("fields");
            assert_eq!(*first, ("tenantId", true), "{}", m.name());
            if m.scope() == ScopeKind::ProviderAccount {
                assert!(
                    members.contains(&("accountId", true)),
                    "{} needs accountId",
                    m.name()
                );
            }
        }
    }

    #[test]
    fn every_example_is_valid_input_of_its_method() {
        for m in Registry::new().methods() {
            let name = m.name();
            m.input()
                .check(&m.example)
                .unwrap_or_else(|e| panic!("{name}: example rejected: {e} {:?}", e.details));
            (m.endpoint.parse)(&m.example)
                .unwrap_or_else(|e| panic!("{name}: example does not parse: {e}"));
        }
    }
}
