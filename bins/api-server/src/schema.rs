//! Input schemas as data: every method's fields with their constraints.
//! Each method's input is declared once, with `input!`, as a struct whose
//! fields carry their wire name and constraints; validation, the OpenAPI
//! request schema and the typed value the handler receives all come from
//! that one declaration.

use crate::error::ApiError;
use regex::Regex;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value, json};

/// The type and constraints of one input value.
#[derive(Debug, Clone)]
pub enum Ty {
    /// A string of `min_len..=max_len` characters matching `pattern`.
    Str {
        min_len: usize,
        max_len: usize,
        pattern: Option<Regex>,
    },
    /// A JSON integer in `min..=max`.
    Int { min: i64, max: i64 },
    /// A JSON boolean.
    Bool,
    /// One of the listed strings.
    Enum(&'static [&'static str]),
    /// A nested object with its own fields (unknown keys rejected).
    Obj(Vec<Field>),
    /// An array of items.
    Arr {
        item: Box<Ty>,
        min_items: usize,
        max_items: usize,
        /// Documented as `uniqueItems`; the handler enforces its own, stricter
        /// rule (e.g. unique flavor names) with its own `details`.
        unique: bool,
    },
    /// An object whose keys follow `key` and whose values follow `value`.
    Map {
        key: Box<Ty>,
        value: Box<Ty>,
        max_entries: usize,
    },
    /// An object validated by the handler (a provider's manifest).
    AnyObject,
    /// An object validated by the handler, documented with this schema
    /// (the handler's rules give the contract's `details`).
    Handled(fn() -> Value),
}

/// One input field.
#[derive(Debug, Clone)]
pub struct Field {
    /// The name as sent.
    pub name: &'static str,
    /// Type and constraints.
    pub ty: Ty,
    /// Whether it must be present.
    pub required: bool,
    /// The default when absent (documented; handlers apply it).
    pub default: Option<Value>,
}

fn regex(p: &str) -> Regex {
    #[expect(
        clippy::expect_used,
        reason = "patterns are compile-time constants checked by the registry tests"
    )]
    Regex::new(p).expect("valid pattern")
}

/// A string with a pattern, at most `max_len` characters.
pub fn pat(max_len: usize, pattern: &str) -> Ty {
    Ty::Str {
        min_len: 1,
        max_len,
        pattern: Some(regex(pattern)),
    }
}

/// An integer range.
pub fn int(min: i64, max: i64) -> Ty {
    Ty::Int { min, max }
}

/// A required field.
pub fn req(name: &'static str, ty: Ty) -> Field {
    Field {
        name,
        ty,
        required: true,
        default: None,
    }
}

/// An optional field.
pub fn opt(name: &'static str, ty: Ty) -> Field {
    Field {
        name,
        ty,
        required: false,
        default: None,
    }
}

/// An optional field with a default the server applies when it is absent.
pub fn def(name: &'static str, ty: Ty, default: Value) -> Field {
    Field {
        name,
        ty,
        required: false,
        default: Some(default),
    }
}

// The id and name patterns of the contract.
const B32: &str = "[0-9a-hjkmnp-tv-z]{26,52}";

/// `tenantId`-style names.
pub fn tenant_id() -> Ty {
    pat(128, "^[A-Za-z0-9._:-]{1,128}$")
}
/// Idempotency keys.
pub fn idem_key() -> Ty {
    pat(128, "^[A-Za-z0-9._:-]{1,128}$")
}
/// A TypeID with `prefix`.
pub fn typeid(prefix: &'static str) -> Ty {
    pat(prefix.len() + 1 + 52, &format!("^{prefix}_{B32}$"))
}
/// Display names.
pub fn name() -> Ty {
    pat(128, "^[A-Za-z0-9._ -]{1,128}$")
}
/// Quota resource names.
pub fn resource() -> Ty {
    pat(64, "^[A-Za-z][A-Za-z0-9._-]{0,63}$")
}
/// Provider reservation ids.
pub fn reservation_id() -> Ty {
    pat(300, "^[A-Za-z0-9._/:-]{1,300}$")
}
/// Epoch milliseconds.
pub fn instant() -> Ty {
    int(0, i64::MAX)
}

/// The opaque cursor of a newest-first list (`reservationGrants.list`,
/// `instances.list`; `storage::model::keyset`): `k`, a non-negative 64-bit
/// instant in 13 lower-case base32hex characters (the last one's padding bit
/// zero), and a TypeID suffix, so every string the pattern allows decodes.
pub fn keyset_cursor() -> Ty {
    pat(
        40,
        "^k[0-9a-f][0-9a-v]{11}[02468acegikmoqsu][0-7][0-9a-hjkmnp-tv-z]{25}$",
    )
}

/// The position a [`keyset_cursor`] `after` carries for ids with `prefix`
/// (`INVALID_INPUT` on `after` if it is not such a cursor).
pub fn keyset_after(
    after: Option<&str>,
    prefix: &str,
    method: &str,
) -> Result<Option<storage::model::keyset::Position>, ApiError> {
    after
        .map(|c| {
            storage::model::keyset::Position::decode(c, prefix).ok_or_else(|| {
                ApiError::invalid("after", "pattern", format!("not a cursor from {method}"))
            })
        })
        .transpose()
}

/// A non-empty set of the `allowed` states.
pub fn states(allowed: &'static [&'static str]) -> Ty {
    Ty::Arr {
        item: Box::new(Ty::Enum(allowed)),
        min_items: 1,
        max_items: allowed.len(),
        unique: true,
    }
}

/// A method's input type, declared with `input!`.
pub trait Input: DeserializeOwned + Send + 'static {
    /// The fields after `tenantId` (which every method takes first).
    fn fields() -> Vec<Field>;
}

/// Declares a method's input: one struct, one line per field with its Rust
/// type, its wire name and its constraints. `req` fields are required,
/// `opt` fields become `Option<T>`, `def` fields take the declared default
/// when absent. The struct deserializes from the validated body (defaults
/// applied), so the handler never sees a value the schema did not allow.
macro_rules! input {
    ($(#[$meta:meta])* $vis:vis struct $name:ident {
        $($kind:ident $field:ident: $ty:ty = ($wire:literal, $spec:expr $(, $default:expr)?)),*
        $(,)?
    }) => {
        $(#[$meta])*
        #[derive(Debug, serde::Deserialize)]
        $vis struct $name {
            $(
                #[serde(rename = $wire)]
                pub $field: $crate::schema::input_field_ty!($kind $ty),
            )*
        }
        impl $crate::schema::Input for $name {
            fn fields() -> Vec<$crate::schema::Field> {
                vec![$($crate::schema::$kind($wire, $spec $(, $default)?)),*]
            }
        }
    };
}
pub(crate) use input;

/// The Rust type of an [`input!`] field of kind `req`, `opt` or `def`.
macro_rules! input_field_ty {
    (req $t:ty) => { $t };
    (opt $t:ty) => { Option<$t> };
    (def $t:ty) => { $t };
}
pub(crate) use input_field_ty;

input! {
    /// The input of a method that takes only the acting tenant.
    pub struct TenantOnly {}
}

/// The validated body as `I`, with the declared defaults applied. A failure
/// here means the declaration's Rust type disagrees with its constraints: a
/// bug, answered `INTERNAL` (the registry's tests parse every example).
pub fn parse_input<I: Input>(body: &Value) -> Result<I, ApiError> {
    let mut body = body.clone();
    if let Some(obj) = body.as_object_mut() {
        for f in I::fields() {
            if let Some(d) = f.default
                && obj.get(f.name).is_none_or(Value::is_null)
            {
                obj.insert(f.name.to_owned(), d);
            }
        }
    }
    serde_json::from_value(body).map_err(ApiError::internal)
}

fn type_name(ty: &Ty) -> &'static str {
    match ty {
        Ty::Str { .. } | Ty::Enum(_) => "string",
        Ty::Int { .. } => "integer",
        Ty::Bool => "boolean",
        Ty::Obj(_) | Ty::Map { .. } | Ty::AnyObject | Ty::Handled(_) => "object",
        Ty::Arr { .. } => "array",
    }
}

fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_owned()
    } else {
        format!("{prefix}.{name}")
    }
}

/// Validates an object against `fields`: unknown keys first, then every
/// declared field in order. Returns the object unchanged when valid.
pub fn validate_object(value: &Value, fields: &[Field], path: &str) -> Result<(), ApiError> {
    let Some(obj) = value.as_object() else {
        return Err(if path.is_empty() {
            ApiError::new(
                crate::error::Code::InvalidInput,
                "the body must be a JSON object",
            )
            .with("reason", "type")
        } else {
            ApiError::invalid(path, "type", format!("{path} must be an object"))
        });
    };
    for key in obj.keys() {
        if !fields.iter().any(|f| f.name == key) {
            let field = join(path, key);
            return Err(ApiError::invalid(
                &field,
                "unknown",
                format!("unknown field {field}"),
            ));
        }
    }
    for f in fields {
        let field = join(path, f.name);
        match obj.get(f.name) {
            None | Some(Value::Null) if f.required => {
                return Err(ApiError::invalid(
                    &field,
                    "missing",
                    format!("{field} is required"),
                ));
            }
            None | Some(Value::Null) => {}
            Some(v) => validate_value(v, &f.ty, &field)?,
        }
    }
    Ok(())
}

fn validate_value(v: &Value, ty: &Ty, field: &str) -> Result<(), ApiError> {
    let type_err = || {
        ApiError::invalid(
            field,
            "type",
            format!("{field} must be of type {}", type_name(ty)),
        )
    };
    match ty {
        Ty::Str {
            min_len,
            max_len,
            pattern,
        } => {
            let s = v.as_str().ok_or_else(type_err)?;
            let n = s.chars().count();
            if n < *min_len || n > *max_len {
                return Err(ApiError::invalid(
                    field,
                    "length",
                    format!("{field} must have {min_len} to {max_len} characters"),
                )
                .with("maxLength", *max_len));
            }
            if let Some(re) = pattern
                && !re.is_match(s)
            {
                return Err(ApiError::invalid(
                    field,
                    "pattern",
                    format!("{field} must match {}", re.as_str()),
                )
                .with("pattern", re.as_str()));
            }
        }
        Ty::Int { min, max } => {
            let n = match v {
                Value::Number(n) if n.is_i64() || n.is_u64() => n.as_i64(),
                _ => return Err(type_err()),
            };
            match n {
                Some(n) if n >= *min && n <= *max => {}
                _ => {
                    return Err(ApiError::invalid(
                        field,
                        "range",
                        format!("{field} must be between {min} and {max}"),
                    )
                    .with("min", *min)
                    .with("max", *max));
                }
            }
        }
        Ty::Bool => {
            v.as_bool().ok_or_else(type_err)?;
        }
        Ty::Enum(options) => {
            let s = v.as_str().ok_or_else(type_err)?;
            if !options.contains(&s) {
                return Err(ApiError::invalid(
                    field,
                    "enum",
                    format!("{field} must be one of {}", options.join(", ")),
                )
                .with("allowed", options.to_vec()));
            }
        }
        Ty::Obj(fields) => validate_object(v, fields, field)?,
        Ty::Arr {
            item,
            min_items,
            max_items,
            ..
        } => {
            let items = v.as_array().ok_or_else(type_err)?;
            if items.len() < *min_items || items.len() > *max_items {
                return Err(ApiError::invalid(
                    field,
                    "length",
                    format!("{field} must have {min_items} to {max_items} items"),
                ));
            }
            for (i, it) in items.iter().enumerate() {
                validate_value(it, item, &format!("{field}[{i}]"))?;
            }
        }
        Ty::Map {
            key,
            value,
            max_entries,
        } => {
            let obj = v.as_object().ok_or_else(type_err)?;
            if obj.len() > *max_entries {
                return Err(ApiError::invalid(
                    field,
                    "length",
                    format!("{field} must have at most {max_entries} entries"),
                ));
            }
            for (k, val) in obj {
                let sub = join(field, k);
                validate_value(&Value::String(k.clone()), key, &sub)?;
                validate_value(val, value, &sub)?;
            }
        }
        Ty::AnyObject | Ty::Handled(_) => {
            v.as_object().ok_or_else(type_err)?;
        }
    }
    Ok(())
}

/// JSON Schema (OpenAPI 3.1 dialect) of a type.
pub fn json_schema(ty: &Ty) -> Value {
    match ty {
        Ty::Str {
            min_len,
            max_len,
            pattern,
        } => {
            let mut s = json!({ "type": "string", "minLength": min_len, "maxLength": max_len });
            if let Some(re) = pattern {
                s["pattern"] = json!(re.as_str());
            }
            s
        }
        Ty::Int { min, max } => json!({
            "type": "integer",
            "format": if *min >= i64::from(i32::MIN) && *max <= i64::from(i32::MAX) {
                "int32"
            } else {
                "int64"
            },
            "minimum": min,
            "maximum": max,
        }),
        Ty::Bool => json!({ "type": "boolean" }),
        Ty::Enum(options) => json!({ "type": "string", "enum": options }),
        Ty::Obj(fields) => object_schema(fields),
        Ty::Arr {
            item,
            min_items,
            max_items,
            unique,
        } => {
            let mut s = json!({
                "type": "array",
                "items": json_schema(item),
                "minItems": min_items,
                "maxItems": max_items,
            });
            if *unique {
                s["uniqueItems"] = json!(true);
            }
            s
        }
        Ty::Map {
            key,
            value,
            max_entries,
        } => json!({
            "type": "object",
            "propertyNames": json_schema(key),
            "additionalProperties": json_schema(value),
            "maxProperties": max_entries,
        }),
        Ty::AnyObject => json!({ "type": "object" }),
        Ty::Handled(schema) => schema(),
    }
}

/// JSON Schema of an object with `fields` (no additional properties).
pub fn object_schema(fields: &[Field]) -> Value {
    let mut props = Map::new();
    for f in fields {
        let mut s = json_schema(&f.ty);
        if let Some(d) = &f.default {
            s["default"] = d.clone();
        }
        props.insert(f.name.to_owned(), s);
    }
    let required: Vec<&str> = fields
        .iter()
        .filter(|f| f.required)
        .map(|f| f.name)
        .collect();
    json!({
        "type": "object",
        "properties": props,
        "required": required,
        "additionalProperties": false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields() -> Vec<Field> {
        vec![
            req("tenantId", tenant_id()),
            req("slots", int(1, 100_000)),
            opt("all", Ty::Bool),
            opt("config", Ty::Obj(vec![req("project", pat(30, "^[a-z]+$"))])),
        ]
    }

    fn reason(v: Value) -> (String, String) {
        let e = validate_object(&v, &fields(), "").unwrap_err();
        (
            e.details["field"].as_str().unwrap_or("").to_owned(),
            e.details["reason"].as_str().unwrap_or("").to_owned(),
        )
    }

    #[test]
    fn each_constraint_has_its_reason() {
        let r = |f: &str, r: &str| (f.to_owned(), r.to_owned());
        assert_eq!(reason(json!({ "slots": 1 })), r("tenantId", "missing"));
        assert_eq!(
            reason(json!({ "tenantId": 5, "slots": 1 })),
            r("tenantId", "type")
        );
        assert_eq!(
            reason(json!({ "tenantId": "a b", "slots": 1 })),
            r("tenantId", "pattern")
        );
        assert_eq!(
            reason(json!({ "tenantId": "a".repeat(129), "slots": 1 })),
            r("tenantId", "length")
        );
        assert_eq!(
            reason(json!({ "tenantId": "a", "slots": 0 })),
            r("slots", "range")
        );
        assert_eq!(
            reason(json!({ "tenantId": "a", "slots": 1.0 })),
            r("slots", "type")
        );
        assert_eq!(
            reason(json!({ "tenantId": "a", "slots": "1" })),
            r("slots", "type")
        );
        assert_eq!(
            reason(json!({ "tenantId": "a", "slots": 1, "x": 1 })),
            r("x", "unknown")
        );
        assert_eq!(
            reason(json!({ "tenantId": "a", "slots": 1, "all": "yes" })),
            r("all", "type")
        );
        assert_eq!(
            reason(json!({ "tenantId": "a", "slots": 1, "config": {} })),
            r("config.project", "missing")
        );
        assert_eq!(
            reason(json!({ "tenantId": "a", "slots": 1, "config": { "project": "a", "k": 1 } })),
            r("config.k", "unknown")
        );
        assert!(validate_object(&json!({ "tenantId": "a", "slots": 1 }), &fields(), "").is_ok());
    }
}
