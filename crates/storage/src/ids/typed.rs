//! The platform's ids as types: each parsed once, at the edge, against its
//! pattern, so a function that takes a [`GrantId`] cannot be handed an
//! account id, and a call that swaps two ids fails to compile.
//!
//! Each id knows its pattern (the same one the API's schema states) and
//! serializes as its string. Rows read back from the database are trusted
//! ([`GrantId::from_row`]); everything else goes through `parse`.

use std::borrow::Borrow;
use std::fmt;
use std::sync::LazyLock;

use regex::Regex;

/// A string that is not a valid id of the kind asked for.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{value:?} is not a {kind} (pattern {pattern})")]
pub struct IdError {
    /// The kind of id (`grant id`, ...).
    pub kind: &'static str,
    /// Its pattern.
    pub pattern: &'static str,
    /// The refused value (as given).
    pub value: String,
}

/// The TypeID suffix as the API accepts it (26 to 52 lowercase Crockford
/// base32 characters).
macro_rules! typeid_pattern {
    ($prefix:literal) => {
        concat!("^", $prefix, "_[0-9a-hjkmnp-tv-z]{26,52}$")
    };
}

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident, $kind:literal, $pattern:expr, max $max:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[derive(serde::Serialize, serde::Deserialize)]
        #[serde(try_from = "String", into = "String")]
        pub struct $name(String);

        impl $name {
            /// The pattern every value matches.
            pub const PATTERN: &'static str = $pattern;
            /// The longest value.
            pub const MAX_LEN: usize = $max;

            /// Parses `value`, or says why it is not one.
            pub fn parse(value: &str) -> Result<Self, IdError> {
                static RE: LazyLock<Regex> = LazyLock::new(|| {
                    Regex::new($name::PATTERN).unwrap_or_else(|e| unreachable!("{e}"))
                });
                if value.len() <= Self::MAX_LEN && RE.is_match(value) {
                    Ok($name(value.to_owned()))
                } else {
                    Err(IdError {
                        kind: $kind,
                        pattern: Self::PATTERN,
                        value: value.to_owned(),
                    })
                }
            }

            /// An id read back from a row this product wrote: not checked
            /// again.
            pub fn from_row(value: String) -> Self {
                $name(value)
            }

            /// The id as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// The id as an owned string.
            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }

        impl TryFrom<String> for $name {
            type Error = IdError;

            fn try_from(value: String) -> Result<Self, IdError> {
                $name::parse(&value)
            }
        }

        impl std::str::FromStr for $name {
            type Err = IdError;

            fn from_str(value: &str) -> Result<Self, IdError> {
                $name::parse(value)
            }
        }

        impl From<$name> for String {
            fn from(id: $name) -> String {
                id.0
            }
        }

        impl schemars::JsonSchema for $name {
            fn inline_schema() -> bool {
                true
            }

            fn schema_name() -> std::borrow::Cow<'static, str> {
                stringify!($name).into()
            }

            fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
                schemars::json_schema!({
                    "type": "string",
                    "minLength": 1,
                    "maxLength": $max,
                    "pattern": $pattern,
                })
            }
        }
    };
}

/// The longest TypeID: a prefix, `_` and 52 characters.
const fn typeid_max(prefix: &str) -> usize {
    prefix.len() + 1 + 52
}

id_type!(
    /// A tenant's id: its name (`root`, `acme`), never reused.
    TenantId, "tenant id", "^[A-Za-z0-9._:-]{1,128}$", max 128
);
id_type!(
    /// A provider account: `pacct_...`.
    AccountId, "provider account id", typeid_pattern!("pacct"), max typeid_max("pacct")
);
id_type!(
    /// A reservation, as the provider names it.
    ReservationId, "reservation id", "^[A-Za-z0-9._/:-]{1,300}$", max 300
);
id_type!(
    /// A pool: `pool_...`.
    PoolId, "pool id", typeid_pattern!("pool"), max typeid_max("pool")
);
id_type!(
    /// A reservation grant: `rgrant_...`.
    GrantId, "grant id", typeid_pattern!("rgrant"), max typeid_max("rgrant")
);
id_type!(
    /// An instance: `inst_...`.
    InstanceId, "instance id", typeid_pattern!("inst"), max typeid_max("inst")
);
id_type!(
    /// A tenant's project: `prj_...`.
    ProjectId, "project id", typeid_pattern!("prj"), max typeid_max("prj")
);
id_type!(
    /// An API key: `key_...`.
    KeyId, "key id", typeid_pattern!("key"), max typeid_max("key")
);
id_type!(
    /// A webhook: `whk_...`.
    WebhookId, "webhook id", typeid_pattern!("whk"), max typeid_max("whk")
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_id_takes_its_own_kind_only() {
        let grant = "rgrant_01q3dcbd00fzvack77yts9x81e";
        assert_eq!(GrantId::parse(grant).unwrap().as_str(), grant);
        let e = AccountId::parse(grant).unwrap_err();
        assert_eq!(e.kind, "provider account id");
        assert!(PoolId::parse("pool_").is_err());
        assert!(GrantId::parse("rgrant_01Q3DCBD00FZVACK77YTS9X81E").is_err());
        assert!(TenantId::parse("acme").is_ok());
        assert!(TenantId::parse("").is_err());
        assert!(TenantId::parse(&"a".repeat(129)).is_err());
        assert!(ReservationId::parse("projects/p/zones/z/reservations/r").is_ok());
    }

    #[test]
    fn new_ids_parse() {
        let at = 1_700_000_000_000;
        assert!(GrantId::parse(&super::super::new_id("rgrant", at)).is_ok());
        assert!(AccountId::parse(&super::super::new_id("pacct", at)).is_ok());
        assert!(InstanceId::parse(&super::super::new_id("inst", at)).is_ok());
        assert!(PoolId::parse(&super::super::new_id("pool", at)).is_ok());
        assert!(ProjectId::parse(&super::super::new_id("prj", at)).is_ok());
        assert!(KeyId::parse(&super::super::new_id("key", at)).is_ok());
        assert!(WebhookId::parse(&super::super::new_id("whk", at)).is_ok());
    }

    #[test]
    fn serde_checks_the_pattern() {
        let ok: GrantId = serde_json::from_str("\"rgrant_01q3dcbd00fzvack77yts9x81e\"").unwrap();
        assert_eq!(
            serde_json::to_string(&ok).unwrap(),
            "\"rgrant_01q3dcbd00fzvack77yts9x81e\""
        );
        assert!(serde_json::from_str::<GrantId>("\"pool_01q3dcbd00fzvack77yts9x81e\"").is_err());
    }
}
