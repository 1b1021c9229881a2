//! The validation engine: an input type's schemas compiled once per
//! process by the `jsonschema` crate, and the one mapping from the crate's
//! errors to the contract's `INVALID_INPUT` answers (which fault wins, its
//! field path, its reason and details).

use std::any::TypeId;
use std::borrow::Cow;
use std::collections::HashMap;
use std::sync::{LazyLock, Mutex, PoisonError};

use jsonschema::error::ValidationErrorKind;
use jsonschema::paths::Location;
use jsonschema::{Keyword, ValidationError, Validator};
use schemars::generate::Contract;
use serde_json::{Map, Value};

use super::input::{CHECKED_BY_HANDLER, Input, each_object, schema_of};
use crate::error::{ApiError, Code};

/// How many of a body's faults are weighed to pick the one answered.
const MAX_FAULTS: usize = 100;

/// One method's input, compiled: the schemas and the validator built from
/// them, once per process and type ([`InputSchema::of`]).
pub struct InputSchema {
    /// The request body's schema as the OpenAPI document gives it.
    doc: Value,
    /// What the body is checked against: `doc`, with the objects the
    /// handler checks reduced to their type.
    rules: Value,
    /// The same types' schema under the serialize contract, which lists
    /// every member in `required` in declaration order: the order in which
    /// the members are checked, so the first error in it is the answer.
    order: Value,
    validator: Validator,
}

impl InputSchema {
    /// The compiled input of `I` (built on first use, then shared).
    pub fn of<I: Input>() -> &'static InputSchema {
        static COMPILED: LazyLock<Mutex<HashMap<TypeId, &'static InputSchema>>> =
            LazyLock::new(Mutex::default);
        let mut compiled = COMPILED.lock().unwrap_or_else(PoisonError::into_inner);
        compiled
            .entry(TypeId::of::<I>())
            .or_insert_with(|| Box::leak(Box::new(InputSchema::compile::<I>())))
    }

    fn compile<I: Input>() -> InputSchema {
        let doc = schema_of::<I>(Contract::Deserialize);
        let mut rules = doc.clone();
        each_object(&mut rules, &mut |o| {
            if o.remove(CHECKED_BY_HANDLER).is_some() {
                o.retain(|k, _| k == "type");
            }
        });
        let mut doc = doc;
        each_object(&mut doc, &mut |o| {
            o.remove(CHECKED_BY_HANDLER);
        });
        #[expect(
            clippy::expect_used,
            reason = "the schemas are the types' own; the registry tests compile every one"
        )]
        let validator = jsonschema::options()
            .with_draft(jsonschema::Draft::Draft202012)
            .with_keyword("format", integer_format)
            .build(&rules)
            .expect("an input schema compiles");
        InputSchema {
            doc,
            rules,
            order: schema_of::<I>(Contract::Serialize),
            validator,
        }
    }

    /// The request body's schema (OpenAPI 3.1 dialect).
    pub fn doc(&self) -> &Value {
        &self.doc
    }

    /// The members, `tenantId` first, with whether each is required.
    pub fn members(&self) -> Vec<(&str, bool)> {
        let required = self.rules.get("required").and_then(Value::as_array);
        let listed = |name: &str| required.is_some_and(|r| r.iter().any(|n| n == name));
        names(&self.order)
            .into_iter()
            .map(|name| (name, listed(name)))
            .collect()
    }

    /// Checks a body: `Ok` if it is valid input, else the `INVALID_INPUT`
    /// answer the contract gives its first fault. Members are checked in
    /// declaration order (unknown members first), each value's type before
    /// its length before its pattern, range or enum, a container before
    /// what it holds; a `null` member is as if absent.
    pub fn check(&self, body: &Value) -> Result<(), ApiError> {
        if self.validator.is_valid(body) {
            return Ok(());
        }
        // The first faults only: a body of a million bad items must not
        // cost a million errors (the answer names one fault anyway; below
        // this many, it is the first in the checking order).
        let errors: Vec<ValidationError<'_>> =
            self.validator.iter_errors(body).take(MAX_FAULTS).collect();
        let first = errors
            .iter()
            .filter_map(|e| self.fault(e, body))
            .min_by(|a, b| a.0.cmp(&b.0));
        match first {
            Some((_, at, fault)) => Err(fault.answer(&field(body, at))),
            None => Ok(()),
        }
    }

    /// What one of the crate's errors means for the contract, with its
    /// place in the checking order; `None` for what the contract does not
    /// refuse. With [`Fault::answer`], the one mapping from the crate's
    /// error kinds to the contract's reasons.
    fn fault<'e>(
        &'e self,
        e: &'e ValidationError<'_>,
        body: &Value,
    ) -> Option<(Vec<Step>, &'e Location, Fault<'e>)> {
        let at = e.instance_path();
        let Place {
            mut rank,
            member,
            rules,
            parent,
            order,
        } = Place::find(body, &self.rules, &self.order, at)?;
        if let Some(name) = member
            && e.instance().is_null()
        {
            // A null member is as if absent: missing if required, else fine.
            let required = parent["required"].as_array();
            required
                .is_some_and(|r| r.iter().any(|n| *n == name))
                .then_some(())?;
            rank.push(Step::Check(0));
            return Some((rank, at, Fault::Missing(None)));
        }
        let (step, fault) = match e.kind() {
            ValidationErrorKind::Required { property } => {
                let name = property.as_str()?;
                rank.push(Step::Member(position(order, name)));
                (Step::Check(0), Fault::Missing(Some(name)))
            }
            ValidationErrorKind::AdditionalProperties { unexpected } => {
                let name = unexpected.iter().min()?;
                rank.push(Step::Unknown(name.clone()));
                (Step::Check(0), Fault::Unknown(name))
            }
            ValidationErrorKind::PropertyNames { error } => {
                let key = error.instance().as_str()?;
                rank.push(Step::Entry(key.to_owned(), 0));
                let (kind, rules) = (error.kind(), &rules["propertyNames"]);
                let key = Some(key);
                (stage(kind)?, Fault::Breaks { key, kind, rules })
            }
            // Only the body's own type can fail at its root.
            ValidationErrorKind::Type { .. } if rank.is_empty() => {
                (Step::Check(0), Fault::NotAnObject)
            }
            kind => (
                stage(kind)?,
                Fault::Breaks {
                    key: None,
                    kind,
                    rules,
                },
            ),
        };
        rank.push(step);
        Some((rank, at, fault))
    }
}

/// What an error means for the contract, answered only if it comes first.
enum Fault<'e> {
    /// The value, or its member `name`, is missing (absent or null).
    Missing(Option<&'e str>),
    /// The member `name` is not declared.
    Unknown(&'e str),
    /// The body is not an object.
    NotAnObject,
    /// The value, or its map `key`, breaks a rule of `rules`.
    Breaks {
        key: Option<&'e str>,
        kind: &'e ValidationErrorKind,
        rules: &'e Value,
    },
}

/// The stage of a check of a value: its type, then its length, then the
/// rest; `None` for `uniqueItems`, which is documented while the handler
/// applies its own, stricter rule (unique flavor names) with its own
/// `details`, and repeated states are harmless.
fn stage(kind: &ValidationErrorKind) -> Option<Step> {
    Some(Step::Check(match kind {
        ValidationErrorKind::UniqueItems => return None,
        ValidationErrorKind::Type { .. } | ValidationErrorKind::Custom { .. } => 0,
        ValidationErrorKind::MinLength { .. }
        | ValidationErrorKind::MaxLength { .. }
        | ValidationErrorKind::MinItems { .. }
        | ValidationErrorKind::MaxItems { .. }
        | ValidationErrorKind::MaxProperties { .. } => 1,
        _ => 2,
    }))
}

impl Fault<'_> {
    /// The contract's answer, the value being at `field`.
    fn answer(self, field: &str) -> ApiError {
        let (rules, kind, field) = match self {
            Fault::Missing(name) => {
                let field = name.map_or_else(|| field.to_owned(), |n| join(field, n));
                return ApiError::invalid(&field, "missing", format!("{field} is required"));
            }
            Fault::Unknown(name) => {
                let field = join(field, name);
                return ApiError::invalid(&field, "unknown", format!("unknown field {field}"));
            }
            Fault::NotAnObject => {
                return ApiError::new(Code::InvalidInput, "the body must be a JSON object")
                    .with("reason", "type");
            }
            Fault::Breaks { key, kind, rules } => (
                rules,
                kind,
                key.map_or_else(|| field.to_owned(), |k| join(field, k)),
            ),
        };
        let field = field.as_str();
        let n = |key: &str| rules[key].clone();
        match kind {
            ValidationErrorKind::Type { .. } | ValidationErrorKind::Custom { .. } => {
                let message = if rules.get("properties").is_some() {
                    format!("{field} must be an object")
                } else {
                    let ty = rules["type"].as_str().unwrap_or("its type");
                    format!("{field} must be of type {ty}")
                };
                ApiError::invalid(field, "type", message)
            }
            ValidationErrorKind::MinLength { .. } | ValidationErrorKind::MaxLength { .. } => {
                let (min, max) = (n("minLength"), n("maxLength"));
                let message = format!("{field} must have {min} to {max} characters");
                ApiError::invalid(field, "length", message).with("maxLength", max)
            }
            ValidationErrorKind::MinItems { .. } | ValidationErrorKind::MaxItems { .. } => {
                let (min, max) = (n("minItems"), n("maxItems"));
                let message = format!("{field} must have {min} to {max} items");
                ApiError::invalid(field, "length", message)
            }
            ValidationErrorKind::MaxProperties { limit } => {
                let message = format!("{field} must have at most {limit} entries");
                ApiError::invalid(field, "length", message)
            }
            ValidationErrorKind::Pattern { pattern } => {
                let message = format!("{field} must match {pattern}");
                ApiError::invalid(field, "pattern", message).with("pattern", pattern.clone())
            }
            ValidationErrorKind::Minimum { .. } | ValidationErrorKind::Maximum { .. } => {
                let (min, max) = (n("minimum"), n("maximum"));
                let message = format!("{field} must be between {min} and {max}");
                ApiError::invalid(field, "range", message)
                    .with("min", min)
                    .with("max", max)
            }
            ValidationErrorKind::Enum { options } => {
                let allowed: Vec<&str> = options
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(Value::as_str)
                    .collect();
                let message = format!("{field} must be one of {}", allowed.join(", "));
                ApiError::invalid(field, "enum", message).with("allowed", allowed)
            }
            // The input types use no other keyword.
            other => {
                let message = format!("{field} breaks its {} rule", other.keyword());
                ApiError::invalid(field, other.keyword(), message)
            }
        }
    }
}

/// One step of an error's place in the checking order. At one place the
/// checks of the value itself come first (by their stage: type, then
/// length, then the rest), then unknown members (by name), then declared
/// members (in declaration order), array items (by index) or map entries
/// (by key, the key's checks before its value's).
#[derive(PartialEq, Eq, PartialOrd, Ord)]
enum Step {
    Check(u8),
    Unknown(String),
    Member(usize),
    Item(usize),
    Entry(String, u8),
}

static NULL: Value = Value::Null;

/// Where an error's instance is: its rank so far, its name if it is a
/// declared member, its schema and its parent's schema, and its place in the
/// declaration-order schema.
struct Place<'s> {
    rank: Vec<Step>,
    member: Option<String>,
    rules: &'s Value,
    parent: &'s Value,
    order: &'s Value,
}

impl<'s> Place<'s> {
    fn find(body: &Value, rules: &'s Value, order: &'s Value, at: &Location) -> Option<Self> {
        let mut place = Place {
            rank: Vec::new(),
            member: None,
            rules,
            parent: &NULL,
            order,
        };
        let mut value = body;
        for name in segments(at) {
            place.parent = place.rules;
            place.member = None;
            match value {
                Value::Array(items) => {
                    let i: usize = name.parse().ok()?;
                    value = items.get(i)?;
                    place.rank.push(Step::Item(i));
                    place.rules = &place.rules["items"];
                    place.order = &place.order["items"];
                }
                Value::Object(members) => {
                    value = members.get(name.as_ref())?;
                    if place.rules.get("properties").is_some() {
                        place.rank.push(Step::Member(position(place.order, &name)));
                        let member = |schema: &'s Value| {
                            schema
                                .get("properties")
                                .and_then(|p| p.get(name.as_ref()))
                                .unwrap_or(&NULL)
                        };
                        place.rules = member(place.rules);
                        place.order = member(place.order);
                        place.member = Some(name.into_owned());
                    } else {
                        place.rank.push(Step::Entry(name.into_owned(), 1));
                        place.rules = &place.rules["additionalProperties"];
                        place.order = &place.order["additionalProperties"];
                    }
                }
                _ => return None,
            }
        }
        Some(place)
    }
}

/// The field at `at` as the contract writes it: members joined with `.`,
/// array items as `[i]` (`flavors[0].name`, `quotas.vcpus`).
fn field(body: &Value, at: &Location) -> String {
    let mut field = String::new();
    let mut value = body;
    for name in segments(at) {
        match value {
            Value::Array(items) => {
                field = format!("{field}[{name}]");
                value = name
                    .parse()
                    .ok()
                    .and_then(|i: usize| items.get(i))
                    .unwrap_or(&NULL);
            }
            _ => {
                field = join(&field, &name);
                value = &value[name.as_ref()];
            }
        }
    }
    field
}

/// The member names and indices of a JSON pointer.
fn segments(at: &Location) -> impl Iterator<Item = Cow<'_, str>> {
    at.as_str().split('/').skip(1).map(|s| {
        if s.contains('~') {
            Cow::Owned(s.replace("~1", "/").replace("~0", "~"))
        } else {
            Cow::Borrowed(s)
        }
    })
}

/// The position of member `name` in an object's declaration order.
fn position(order: &Value, name: &str) -> usize {
    order["required"]
        .as_array()
        .and_then(|r| r.iter().position(|n| n == name))
        .unwrap_or(usize::MAX)
}

/// An object's members in declaration order.
fn names(order: &Value) -> Vec<&str> {
    order["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

fn join(prefix: &str, name: &str) -> String {
    if prefix.is_empty() {
        name.to_owned()
    } else {
        format!("{prefix}.{name}")
    }
}

/// The `format` keyword: the integer formats (`int32`, `int64`) refuse a
/// number written with a fraction or an exponent (contract 1.4: no `1.0`),
/// which JSON Schema's `integer` accepts; other formats only annotate.
fn integer_format<'a>(
    _: &'a Map<String, Value>,
    format: &'a Value,
    _: Location,
) -> Result<Box<dyn for<'i> Keyword<'i>>, ValidationError<'a>> {
    let integer = format
        .as_str()
        .is_some_and(|f| f.starts_with("int") || f.starts_with("uint"));
    Ok(Box::new(WrittenAsInteger(integer)))
}

/// Whether a number must be written as an integer.
struct WrittenAsInteger(bool);

impl<'i> Keyword<'i> for WrittenAsInteger {
    fn validate(&self, instance: &'i Value) -> Result<(), ValidationError<'i>> {
        if self.is_valid(instance) {
            Ok(())
        } else {
            Err(ValidationError::custom("must be written as an integer"))
        }
    }

    fn is_valid(&self, instance: &'i Value) -> bool {
        match instance {
            Value::Number(n) if self.0 => n.is_i64() || n.is_u64(),
            _ => true,
        }
    }
}
