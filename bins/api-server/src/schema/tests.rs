//! The mapping from the `jsonschema` crate's errors to the contract's
//! `INVALID_INPUT` answers: each reason, the field paths, which fault wins.

use std::collections::BTreeMap;

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::Deserialize;
use serde_json::{Value, json};

use super::{InputSchema, TENANT_ID, parse};
use crate::error::{ApiError, Code};

/// One input with a member of every kind the methods use.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Sample {
    #[schemars(range(min = 1, max = 100_000))]
    slots: i32,
    #[schemars(range(min = 0, max = i64::MAX))]
    starts_at: Option<i64>,
    #[serde(default)]
    all: bool,
    #[serde(default = "standard")]
    #[schemars(extend("enum" = ["standard", "none"]))]
    billing: String,
    config: Option<Config>,
    #[serde(default)]
    #[schemars(
        with = "Vec<String>",
        length(min = 1, max = 2),
        inner(length(min = 1, max = 8), regex(pattern = "^[a-z]+$"))
    )]
    types: Option<Vec<String>>,
    #[serde(default)]
    #[schemars(schema_with = "quotas")]
    quotas: Option<BTreeMap<String, i64>>,
}

fn standard() -> String {
    "standard".to_owned()
}

/// A nested object.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Config {
    #[schemars(length(min = 1, max = 30), regex(pattern = "^[a-z]+$"))]
    project: String,
    #[schemars(range(min = 0, max = 64))]
    gpus: i64,
}

fn quotas(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "propertyNames": {
            "type": "string", "minLength": 1, "maxLength": 8, "pattern": "^[a-z]+$",
        },
        "additionalProperties": { "type": "integer", "minimum": 0 },
        "maxProperties": 2,
    })
}

/// `base` with `field` set to `value` (`None` removes it).
fn with(field: &str, value: Option<Value>) -> Value {
    let mut body = json!({ "tenantId": "acme", "slots": 1 });
    match value {
        Some(v) => body[field] = v,
        None => {
            body.as_object_mut().map(|o| o.remove(field));
        }
    }
    body
}

fn answer(body: &Value) -> ApiError {
    InputSchema::of::<Sample>()
        .check(body)
        .expect_err("refused")
}

fn field_reason(body: &Value) -> (String, String) {
    let e = answer(body);
    assert_eq!(e.code, Code::InvalidInput);
    let text = |k: &str| {
        e.details
            .get(k)
            .and_then(Value::as_str)
            .unwrap_or("")
            .to_owned()
    };
    (text("field"), text("reason"))
}

#[test]
fn each_contract_reason_comes_from_its_error_kind() {
    let cases: Vec<(&str, Option<Value>, &str, &str)> = vec![
        // missing: absent, or null
        ("tenantId", None, "tenantId", "missing"),
        ("tenantId", Some(Value::Null), "tenantId", "missing"),
        ("slots", None, "slots", "missing"),
        (
            "config",
            Some(json!({ "gpus": 1 })),
            "config.project",
            "missing",
        ),
        (
            "config",
            Some(json!({ "project": null, "gpus": 1 })),
            "config.project",
            "missing",
        ),
        // type
        ("tenantId", Some(json!(5)), "tenantId", "type"),
        ("slots", Some(json!("1")), "slots", "type"),
        ("slots", Some(json!(1.0)), "slots", "type"),
        ("slots", Some(json!(1.5)), "slots", "type"),
        ("slots", Some(json!(1e3)), "slots", "type"),
        ("startsAt", Some(json!(1.0e20)), "startsAt", "type"),
        ("all", Some(json!("yes")), "all", "type"),
        ("billing", Some(json!(1)), "billing", "type"),
        ("config", Some(json!([])), "config", "type"),
        ("types", Some(json!("a")), "types", "type"),
        ("types", Some(json!([1])), "types[0]", "type"),
        ("quotas", Some(json!({ "a": "1" })), "quotas.a", "type"),
        ("quotas", Some(json!({ "a": null })), "quotas.a", "type"),
        // length
        ("tenantId", Some(json!("")), "tenantId", "length"),
        (
            "tenantId",
            Some(json!("a".repeat(129))),
            "tenantId",
            "length",
        ),
        ("types", Some(json!([])), "types", "length"),
        ("types", Some(json!(["a", "b", "c"])), "types", "length"),
        ("types", Some(json!(["abcdefghi"])), "types[0]", "length"),
        (
            "quotas",
            Some(json!({ "a": 1, "b": 1, "c": 1 })),
            "quotas",
            "length",
        ),
        ("quotas", Some(json!({ "": 1 })), "quotas.", "length"),
        // pattern
        ("tenantId", Some(json!("a b")), "tenantId", "pattern"),
        ("tenantId", Some(json!("ключ")), "tenantId", "pattern"),
        ("types", Some(json!(["a", "B"])), "types[1]", "pattern"),
        ("quotas", Some(json!({ "A": 1 })), "quotas.A", "pattern"),
        (
            "config",
            Some(json!({ "project": "A", "gpus": 1 })),
            "config.project",
            "pattern",
        ),
        // range
        ("slots", Some(json!(0)), "slots", "range"),
        ("slots", Some(json!(100_001)), "slots", "range"),
        ("slots", Some(json!(u64::MAX)), "slots", "range"),
        ("startsAt", Some(json!(-1)), "startsAt", "range"),
        ("startsAt", Some(json!(u64::MAX)), "startsAt", "range"),
        ("quotas", Some(json!({ "a": -1 })), "quotas.a", "range"),
        (
            "config",
            Some(json!({ "project": "a", "gpus": 65 })),
            "config.gpus",
            "range",
        ),
        // enum
        ("billing", Some(json!("gold")), "billing", "enum"),
        // unknown
        ("x", Some(json!(1)), "x", "unknown"),
        ("tenantid", Some(json!("acme")), "tenantid", "unknown"),
        (
            "config",
            Some(json!({ "project": "a", "gpus": 1, "k": 1 })),
            "config.k",
            "unknown",
        ),
    ];
    for (field, value, at, reason) in cases {
        let body = with(field, value);
        assert_eq!(
            field_reason(&body),
            (at.to_owned(), reason.to_owned()),
            "{body}"
        );
    }
}

#[test]
fn a_body_that_is_not_an_object_has_no_field() {
    for body in [json!([]), json!("x"), json!(1), Value::Null] {
        let e = answer(&body);
        assert_eq!(e.message, "the body must be a JSON object");
        assert_eq!(Value::Object(e.details), json!({ "reason": "type" }));
    }
}

#[test]
fn the_details_and_messages_name_the_constraint() {
    let e = answer(&with("tenantId", Some(json!(""))));
    assert_eq!(e.message, "tenantId must have 1 to 128 characters");
    assert_eq!(e.details["maxLength"], 128);
    let e = answer(&with("tenantId", Some(json!("a b"))));
    assert_eq!(e.message, "tenantId must match ^[A-Za-z0-9._:-]{1,128}$");
    assert_eq!(e.details["pattern"], TENANT_ID);
    let e = answer(&with("slots", Some(json!(0))));
    assert_eq!(e.message, "slots must be between 1 and 100000");
    assert_eq!(
        (&e.details["min"], &e.details["max"]),
        (&json!(1), &json!(100_000))
    );
    let e = answer(&with("billing", Some(json!("gold"))));
    assert_eq!(e.message, "billing must be one of standard, none");
    assert_eq!(e.details["allowed"], json!(["standard", "none"]));
    let e = answer(&with("slots", Some(json!(1.0))));
    assert_eq!(e.message, "slots must be of type integer");
    let e = answer(&with("config", Some(json!(1))));
    assert_eq!(e.message, "config must be an object");
    let e = answer(&with("types", Some(json!([]))));
    assert_eq!(e.message, "types must have 1 to 2 items");
    let e = answer(&with("quotas", Some(json!({ "a": 1, "b": 1, "c": 1 }))));
    assert_eq!(e.message, "quotas must have at most 2 entries");
    let e = answer(&with("x", Some(json!(1))));
    assert_eq!(e.message, "unknown field x");
    let e = answer(&with("slots", None));
    assert_eq!(e.message, "slots is required");
}

/// `{ tenantId: "a", slots: 1 }` with `members` over it.
fn over(members: Value) -> Value {
    let mut body = json!({ "tenantId": "a", "slots": 1 });
    for (k, v) in members.as_object().into_iter().flatten() {
        body[k] = v.clone();
    }
    body
}

#[test]
fn the_first_fault_in_declaration_order_wins() {
    let cases = [
        // Unknown members before any declared one, the first by name.
        (over(json!({ "z": 1, "y": 1, "slots": 0 })), "y", "unknown"),
        // Then the members in declaration order: tenantId first.
        (json!({ "slots": 0 }), "tenantId", "missing"),
        (
            json!({ "tenantId": "a b", "billing": "x" }),
            "tenantId",
            "pattern",
        ),
        (over(json!({ "slots": 0, "all": "x" })), "slots", "range"),
        (
            json!({ "tenantId": "a", "billing": "x" }),
            "slots",
            "missing",
        ),
        (
            over(json!({ "startsAt": -1, "all": 1 })),
            "startsAt",
            "range",
        ),
        // A value's type before its length before its pattern.
        (
            over(json!({ "tenantId": "a b".repeat(50) })),
            "tenantId",
            "length",
        ),
        // A container before what it holds; items and entries in order,
        // a key before its value.
        (over(json!({ "types": ["A", "B", "c"] })), "types", "length"),
        (over(json!({ "types": ["a", "B"] })), "types[1]", "pattern"),
        (
            over(json!({ "quotas": { "b": -1, "C": 1 } })),
            "quotas.C",
            "pattern",
        ),
        (
            over(json!({ "quotas": { "B": -1 } })),
            "quotas.B",
            "pattern",
        ),
        (
            over(json!({ "quotas": { "b": -1, "c": "x" } })),
            "quotas.b",
            "range",
        ),
        (
            over(json!({ "config": { "gpus": -1, "k": 1 } })),
            "config.k",
            "unknown",
        ),
        (
            over(json!({ "config": { "gpus": -1 } })),
            "config.project",
            "missing",
        ),
    ];
    for (body, field, reason) in cases {
        assert_eq!(
            field_reason(&body),
            (field.to_owned(), reason.to_owned()),
            "{body}"
        );
    }
}

#[test]
fn a_null_member_is_as_if_absent() {
    let body = json!({
        "tenantId": "acme",
        "slots": 2,
        "startsAt": null,
        "all": null,
        "billing": null,
        "types": null,
        "quotas": null,
        "config": null,
    });
    let schema = InputSchema::of::<Sample>();
    schema.check(&body).expect("valid");
    let input: Sample = parse(&body).expect("parses");
    assert_eq!(input.slots, 2);
    assert_eq!(input.starts_at, None);
    assert!(!input.all);
    assert_eq!(input.billing, "standard");
    assert!(input.types.is_none() && input.quotas.is_none() && input.config.is_none());
}

#[test]
fn valid_input_parses_into_the_same_type() {
    let body = json!({
        "tenantId": "acme",
        "slots": 100_000,
        "startsAt": i64::MAX,
        "all": true,
        "billing": "none",
        "config": { "project": "abc", "gpus": 64 },
        "types": ["a", "a"],
        "quotas": { "a": 0, "b": 7 },
    });
    InputSchema::of::<Sample>().check(&body).expect("valid");
    let input: Sample = parse(&body).expect("parses");
    assert_eq!(input.starts_at, Some(i64::MAX));
    assert_eq!(
        input.config.map(|c| (c.project, c.gpus)),
        Some(("abc".to_owned(), 64))
    );
    assert_eq!(input.quotas.map(|q| q.len()), Some(2));
}

#[test]
fn the_members_are_listed_in_declaration_order() {
    let members = InputSchema::of::<Sample>().members();
    assert_eq!(
        members,
        [
            ("tenantId", true),
            ("slots", true),
            ("startsAt", false),
            ("all", false),
            ("billing", false),
            ("config", false),
            ("types", false),
            ("quotas", false),
        ]
    );
}

#[test]
fn the_document_keeps_the_constraints_without_null() {
    let doc = InputSchema::of::<Sample>().doc();
    assert_eq!(doc["additionalProperties"], false);
    assert_eq!(doc["required"], json!(["tenantId", "slots"]));
    let p = &doc["properties"];
    assert_eq!(p["startsAt"]["type"], "integer");
    assert_eq!(p["startsAt"]["format"], "int64");
    assert_eq!(p["slots"]["format"], "int32");
    assert_eq!(p["all"]["default"], false);
    assert_eq!(p["billing"]["default"], "standard");
    assert_eq!(p["types"]["minItems"], 1);
    assert!(p["types"].get("default").is_none());
}
