//! A method's input type, its request body's schema and its value: the
//! type's JSON Schema under a contract (no `null`, integer formats), and the
//! validated body deserialized as the type.

use schemars::generate::{Contract, SchemaSettings};
use schemars::transform::RecursiveTransform;
use schemars::{JsonSchema, Schema};
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

use super::patterns::TENANT_ID;
use crate::error::ApiError;

/// The member every method takes first: the acting tenant.
const TENANT_FIELD: &str = "tenantId";

/// A method's input type: the members after `tenantId`.
pub trait Input: DeserializeOwned + JsonSchema + Send + 'static {}

impl<T: DeserializeOwned + JsonSchema + Send + 'static> Input for T {}

/// The input of a method that takes only the acting tenant.
#[derive(Debug, serde::Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct TenantOnly {}

// A request body as its schema describes it: the acting tenant, then the
// method's own members. Only its schema is used: the handler gets `I`.
#[derive(JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
#[expect(
    dead_code,
    reason = "only its schema is used; the handler receives `I`"
)]
struct Body<I> {
    #[schemars(length(min = 1, max = 128), regex(pattern = TENANT_ID))]
    tenant_id: String,
    #[serde(flatten)]
    input: I,
}

/// Marks a documented object whose rules the handler applies (a provider's
/// manifest, whose checks give the contract's `details`): the body check
/// only asks that it be an object.
pub(super) const CHECKED_BY_HANDLER: &str = "x-checked-by-handler";

/// `schema`, documented as it is and checked by the handler only.
pub fn checked_by_handler(schema: Value) -> Schema {
    let mut schema = Schema::try_from(schema).unwrap_or_default();
    schema.insert(CHECKED_BY_HANDLER.to_owned(), Value::Bool(true));
    schema
}

/// The validated body as `I`: `tenantId` and `null` members (as if absent)
/// left out, serde's defaults applied. A failure here means the type
/// disagrees with its own schema: a bug, answered `INTERNAL` (the registry's
/// tests parse every example).
pub fn parse<I: Input>(body: &Value) -> Result<I, ApiError> {
    let members: Map<String, Value> = body
        .as_object()
        .into_iter()
        .flatten()
        .filter(|(k, v)| *k != TENANT_FIELD && !v.is_null())
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    serde_json::from_value(Value::Object(members)).map_err(ApiError::internal)
}

/// The inline schema of a request body of `I` under `contract`, without
/// `null` in it (a `null` member is as if absent, whatever the type) and
/// with the 32-bit format where an integer's bounds fit in it.
pub(super) fn schema_of<I: Input>(contract: Contract) -> Value {
    let settings = SchemaSettings::draft2020_12()
        .with(|s| {
            s.inline_subschemas = true;
            s.meta_schema = None;
            s.contract = contract;
        })
        .with_transform(RecursiveTransform(not_null))
        .with_transform(RecursiveTransform(int32_when_bounded));
    let mut schema = settings.into_generator().into_root_schema_for::<Body<I>>();
    schema.remove("title");
    schema.remove("description");
    schema.to_value()
}

/// Removes what `Option` adds: `null` among the types, a `null` default.
fn not_null(schema: &mut Schema) {
    if let Some(Value::Array(types)) = schema.get_mut("type") {
        types.retain(|t| t != "null");
        if let [only] = types.as_slice() {
            let only = only.clone();
            schema.insert("type".to_owned(), only);
        }
    }
    if schema.get("default").is_some_and(Value::is_null) {
        schema.remove("default");
    }
}

/// `int32` for an integer whose bounds fit in 32 bits, `int64` otherwise.
fn int32_when_bounded(schema: &mut Schema) {
    if schema.get("type").and_then(Value::as_str) != Some("integer") {
        return;
    }
    let fits = |key: &str| {
        schema
            .get(key)
            .and_then(Value::as_i64)
            .is_some_and(|n| i32::try_from(n).is_ok())
    };
    let format = if fits("minimum") && fits("maximum") {
        "int32"
    } else {
        "int64"
    };
    schema.insert("format".to_owned(), format.into());
}

/// Calls `f` on every object in `value`, depth first.
pub(super) fn each_object(value: &mut Value, f: &mut impl FnMut(&mut Map<String, Value>)) {
    match value {
        Value::Object(o) => {
            f(o);
            o.values_mut().for_each(|v| each_object(v, f));
        }
        Value::Array(a) => a.iter_mut().for_each(|v| each_object(v, f)),
        _ => {}
    }
}
