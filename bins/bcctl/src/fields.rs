//! `bcctl call`: a method's fields from the server's OpenAPI document, so a
//! new method needs no CLI change. `name=value` pairs are typed by the
//! schema (integers, booleans, arrays as JSON or comma lists, objects as
//! JSON, times in any form `when` reads), unknown and missing fields are
//! refused before anything is sent.

use comfy_table::{Table, presets};
use serde_json::{Map, Value, json};

use crate::exit::{Failure, usage};
use crate::output::is_time_field;
use crate::when;

/// One method's input schema.
pub struct MethodSchema {
    /// `module.method`.
    pub name: String,
    /// What it does.
    pub summary: String,
    /// The body's JSON Schema (`properties`, `required`).
    pub schema: Value,
}

impl MethodSchema {
    fn props(&self) -> &Map<String, Value> {
        static EMPTY: std::sync::OnceLock<Map<String, Value>> = std::sync::OnceLock::new();
        self.schema
            .get("properties")
            .and_then(Value::as_object)
            .unwrap_or_else(|| EMPTY.get_or_init(Map::new))
    }

    /// The required fields.
    pub fn required(&self) -> Vec<String> {
        self.schema
            .get("required")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|v| v.as_str().map(str::to_owned))
            .collect()
    }

    /// Whether the method takes an idempotency key.
    pub fn keyed(&self) -> bool {
        self.props().contains_key("idempotencyKey")
    }
}

/// Finds `method` (`module.method` or `module/method`) in the OpenAPI
/// document; an unknown one is a usage error naming the module's methods.
pub fn find(openapi: &Value, method: &str) -> Result<MethodSchema, Failure> {
    let name = method.replace('/', ".");
    let (module, m) = name
        .split_once('.')
        .ok_or_else(|| usage(format!("{method:?} is not module.method")))?;
    let path = format!("/api/compute/{module}/{m}");
    let op = openapi
        .get("paths")
        .and_then(|paths| paths.get(&path))
        .and_then(|path| path.get("post"))
        .unwrap_or(&Value::Null);
    if op.is_null() {
        let known: Vec<String> = openapi["paths"]
            .as_object()
            .into_iter()
            .flatten()
            .filter_map(|(p, v)| {
                v.pointer("/post/operationId")
                    .and_then(Value::as_str)
                    .map(|id| (p, id))
            })
            .filter(|(p, _)| p.starts_with(&format!("/api/compute/{module}/")))
            .map(|(_, id)| id.to_owned())
            .collect();
        return Err(usage(if known.is_empty() {
            format!("no method {name}; bcctl methods lists them")
        } else {
            format!("no method {name}; {module} has {}", known.join(", "))
        }));
    }
    Ok(MethodSchema {
        name,
        summary: op["summary"]
            .as_str()
            .or_else(|| op["description"].as_str())
            .unwrap_or("")
            .to_owned(),
        // `~1` is how a JSON pointer writes the `/` of `application/json`.
        schema: op
            .pointer("/requestBody/content/application~1json/schema")
            .cloned()
            .unwrap_or(Value::Null),
    })
}

fn type_of(prop: &Value) -> String {
    match prop["type"].as_str() {
        Some("array") => format!("array of {}", type_of(&prop["items"])),
        Some(t) => t.to_owned(),
        None if prop["enum"].is_array() => "string".into(),
        None => "any".into(),
    }
}

fn constraints(prop: &Value) -> String {
    let mut c = Vec::new();
    if let Some(e) = prop["enum"].as_array() {
        let names: Vec<String> = e
            .iter()
            .map(|v| v.as_str().unwrap_or("?").to_owned())
            .collect();
        c.push(format!("one of {}", names.join("|")));
    }
    if let Some(e) = prop.pointer("/items/enum").and_then(Value::as_array) {
        let names: Vec<String> = e
            .iter()
            .map(|v| v.as_str().unwrap_or("?").to_owned())
            .collect();
        c.push(format!("each one of {}", names.join("|")));
    }
    for (k, label) in [("minimum", ">="), ("maximum", "<=")] {
        if let Some(n) = prop[k].as_i64()
            && n != 0
            && n != i64::MAX
        {
            c.push(format!("{label} {n}"));
        }
    }
    if let Some(n) = prop["maxLength"].as_u64() {
        c.push(format!("length <= {n}"));
    }
    if let Some(p) = prop["pattern"].as_str() {
        c.push(format!("pattern {p}"));
    }
    c.join(", ")
}

/// The method's fields as a table: name, type, whether required, the
/// constraints; times accept any form `when` reads.
pub fn describe(m: &MethodSchema) -> String {
    let required = m.required();
    let mut t = Table::new();
    t.load_preset(presets::NOTHING);
    t.set_header(["FIELD", "TYPE", "REQUIRED", "CONSTRAINTS"]);
    for (name, prop) in m.props() {
        let mut ty = type_of(prop);
        if ty == "integer" && is_time_field(name) {
            ty = "time".into();
        }
        let req = if required.contains(name) {
            match name.as_str() {
                "tenantId" => "yes (the acting tenant)",
                "idempotencyKey" => "yes (generated)",
                _ => "yes",
            }
        } else {
            ""
        };
        t.add_row([name.clone(), ty, req.to_owned(), constraints(prop)]);
    }
    format!("{}\n  {}\n\n{t}", m.name, m.summary)
}

/// Whether building the body needs the server's now (a relative time).
pub fn needs_now(pairs: &[String]) -> bool {
    pairs.iter().any(|p| {
        p.split_once('=')
            .is_some_and(|(_, v)| v.starts_with('+') || v.contains("now") || v.starts_with("-"))
    })
}

fn convert(name: &str, prop: &Value, raw: &str, now: i64) -> Result<Value, Failure> {
    let bad = |what: &str| usage(format!("field {name}: {raw:?} is not {what}"));
    Ok(match prop["type"].as_str() {
        Some("integer") if is_time_field(name) => {
            json!(when::parse_instant(raw, now).map_err(|e| usage(format!("field {name}: {e}")))?)
        }
        Some("integer") => json!(raw.parse::<i64>().map_err(|_| bad("an integer"))?),
        Some("number") => json!(raw.parse::<f64>().map_err(|_| bad("a number"))?),
        Some("boolean") => match raw {
            "true" | "yes" | "1" => json!(true),
            "false" | "no" | "0" => json!(false),
            _ => return Err(bad("true or false")),
        },
        Some("array") if raw.trim_start().starts_with('[') => {
            serde_json::from_str(raw).map_err(|_| bad("a JSON array"))?
        }
        Some("array") => Value::Array(
            raw.split(',')
                .filter(|s| !s.is_empty())
                .map(|item| convert(name, &prop["items"], item, now))
                .collect::<Result<_, _>>()?,
        ),
        Some("object") => {
            let v: Value = serde_json::from_str(raw).map_err(|_| bad("a JSON object"))?;
            if !v.is_object() {
                return Err(bad("a JSON object"));
            }
            v
        }
        Some("string") => json!(raw),
        _ => serde_json::from_str(raw).unwrap_or_else(|_| json!(raw)),
    })
}

fn set(
    body: &mut Map<String, Value>,
    schema: &Value,
    path: &[&str],
    raw: &str,
    now: i64,
) -> Result<(), Failure> {
    let (first, rest) = path
        .split_first()
        .ok_or_else(|| usage("an empty field name"))?;
    let props = schema["properties"].as_object();
    let prop = props.and_then(|p| p.get(*first));
    let closed = schema["additionalProperties"] == json!(false);
    if prop.is_none() && closed {
        let known: Vec<&str> = props
            .into_iter()
            .flatten()
            .map(|(k, _)| k.as_str())
            .collect();
        return Err(usage(format!(
            "unknown field {first:?}; fields: {}",
            known.join(", ")
        )));
    }
    let prop = prop.cloned().unwrap_or(Value::Null);
    if rest.is_empty() {
        body.insert((*first).to_owned(), convert(first, &prop, raw, now)?);
        return Ok(());
    }
    let child = body.entry((*first).to_owned()).or_insert_with(|| json!({}));
    let map = child
        .as_object_mut()
        .ok_or_else(|| usage(format!("field {first} is not an object")))?;
    set(map, &prop, rest, raw, now)
}

/// The body of a call: `data` (a JSON object) with the `name=value` pairs
/// set on top, `tenantId` and `idempotencyKey` filled in when missing;
/// unknown or missing fields are refused.
pub fn body(
    m: &MethodSchema,
    data: Option<&str>,
    pairs: &[String],
    tenant: &str,
    key: Option<&str>,
    now: i64,
) -> Result<Map<String, Value>, Failure> {
    let mut body = match data {
        Some(text) => match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(map)) => map,
            _ => return Err(usage("--data must be a JSON object")),
        },
        None => Map::new(),
    };
    for pair in pairs {
        let (name, raw) = pair
            .split_once('=')
            .ok_or_else(|| usage(format!("{pair:?} is not name=value")))?;
        let path: Vec<&str> = name.split('.').collect();
        set(&mut body, &m.schema, &path, raw, now)?;
    }
    body.entry("tenantId").or_insert_with(|| json!(tenant));
    if m.keyed() {
        let key = key.map_or_else(new_key, str::to_owned);
        body.entry("idempotencyKey").or_insert_with(|| json!(key));
    }
    let missing: Vec<String> = m
        .required()
        .into_iter()
        .filter(|f| !body.contains_key(f))
        .collect();
    if !missing.is_empty() {
        return Err(usage(format!(
            "{} needs {}; bcctl call {} --fields describes them",
            m.name,
            missing.join(", "),
            m.name
        )));
    }
    if m.schema.get("additionalProperties") == Some(&json!(false)) {
        let props = m.props();
        if let Some(unknown) = body.keys().find(|k| !props.contains_key(*k)) {
            return Err(usage(format!(
                "unknown field {unknown:?}; bcctl call {} --fields lists them",
                m.name
            )));
        }
    }
    Ok(body)
}

/// A new idempotency key: a UUIDv7, so keys sort by creation.
pub fn new_key() -> String {
    uuid::Uuid::now_v7().to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc() -> Value {
        json!({ "paths": { "/api/compute/reservationGrants/create": { "post": {
            "operationId": "reservationGrants.create",
            "summary": "Commits slots.",
            "requestBody": { "content": { "application/json": { "schema": {
                "type": "object",
                "additionalProperties": false,
                "required": ["tenantId", "slots", "startsAt", "idempotencyKey"],
                "properties": {
                    "tenantId": { "type": "string" },
                    "slots": { "type": "integer", "minimum": 1 },
                    "startsAt": { "type": "integer" },
                    "states": { "type": "array", "items": { "type": "string" } },
                    "config": { "type": "object", "properties": {
                        "project": { "type": "string" } } },
                    "idempotencyKey": { "type": "string" }
                }
            } } } }
        } } } })
    }

    #[test]
    fn pairs_are_typed_by_the_schema() {
        let m = find(&doc(), "reservationGrants/create").expect("found");
        let pairs: Vec<String> = ["slots=2", "startsAt=+1h", "states=a,b", "config.project=p"]
            .iter()
            .map(|s| (*s).to_owned())
            .collect();
        let b = body(&m, None, &pairs, "root", Some("k1"), 1_000).expect("body");
        assert_eq!(
            Value::Object(b),
            json!({ "tenantId": "root", "slots": 2, "startsAt": 3_601_000,
                    "states": ["a", "b"], "config": { "project": "p" },
                    "idempotencyKey": "k1" })
        );
    }

    #[test]
    fn unknown_missing_and_mistyped_fields_are_refused_before_sending() {
        let m = find(&doc(), "reservationGrants.create").expect("found");
        let e = body(&m, None, &["slot=2".into()], "root", None, 0).expect_err("unknown");
        assert!(e.to_string().contains("unknown field \"slot\""), "{e}");
        let e = body(&m, None, &["slots=2".into()], "root", None, 0).expect_err("missing");
        assert!(e.to_string().contains("needs startsAt"), "{e}");
        let e = body(&m, None, &["slots=two".into()], "root", None, 0).expect_err("type");
        assert!(e.to_string().contains("not an integer"), "{e}");
        assert_eq!(e.exit_code(), 2);
        let e = find(&doc(), "reservationGrants.make")
            .err()
            .expect("no such method");
        assert!(e.to_string().contains("reservationGrants.create"), "{e}");
    }
}
