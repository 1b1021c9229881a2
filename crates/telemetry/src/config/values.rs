//! The value parsers of the settings: one duration format, whole numbers in
//! a range, and values a function checks. Every error names the setting's
//! environment variable and quotes the value.

use std::ffi::OsStr;
use std::time::Duration;

use clap::builder::TypedValueParser;
use clap::error::ErrorKind;
use clap::{Arg, Command};

/// What a duration written as a bare whole number counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Bare {
    /// Milliseconds: the settings whose names end in `_MS`.
    Millis,
    /// Seconds: the other duration settings.
    Seconds,
}

/// A duration setting: a duration such as `30s`, `1500ms`, `2m` or
/// `1h 30m` (the `humantime` format), or a bare whole number of
/// milliseconds ([`Bare::Millis`]) or seconds ([`Bare::Seconds`]). Zero is
/// refused unless [`Durations::or_zero`] allows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Durations {
    bare: Bare,
    zero: bool,
    max: Option<Duration>,
}

impl Durations {
    /// A setting named `..._MS`: a bare number is milliseconds.
    pub const fn millis() -> Durations {
        Durations {
            bare: Bare::Millis,
            zero: false,
            max: None,
        }
    }

    /// A bare number is seconds.
    pub const fn seconds() -> Durations {
        Durations {
            bare: Bare::Seconds,
            zero: false,
            max: None,
        }
    }

    /// The same, with zero allowed (the setting says what it means).
    pub const fn or_zero(self) -> Durations {
        Durations { zero: true, ..self }
    }

    /// The same, with at most `max`.
    pub const fn at_most(self, max: Duration) -> Durations {
        Durations {
            max: Some(max),
            ..self
        }
    }

    /// Parses `value`, the value of the setting `name`.
    pub fn parse(&self, name: &str, value: &str) -> Result<Duration, String> {
        let text = value.trim();
        let bare = match self.bare {
            Bare::Millis => "a whole number of milliseconds",
            Bare::Seconds => "a whole number of seconds",
        };
        if text.starts_with('-') {
            return Err(format!("{name} must not be negative, not {value:?}"));
        }
        let duration = match text.parse::<u64>() {
            Ok(n) => match self.bare {
                Bare::Millis => Duration::from_millis(n),
                Bare::Seconds => Duration::from_secs(n),
            },
            Err(_) => humantime::parse_duration(text).map_err(|_| {
                format!(
                    "{name} must be a duration such as 30s, 1500ms or 2m, or {bare}; not {value:?}"
                )
            })?,
        };
        if duration.is_zero() && !self.zero {
            return Err(format!("{name} must be longer than 0, not {value:?}"));
        }
        if let Some(max) = self.max
            && duration > max
        {
            let most = humantime::format_duration(max);
            return Err(format!(
                "{name} must be at most {most} ({} ms), not {value:?}",
                max.as_millis()
            ));
        }
        Ok(duration)
    }
}

/// A whole number from `min` to `max`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Whole {
    min: u64,
    max: u64,
}

impl Whole {
    /// Any whole number.
    pub const fn any() -> Whole {
        Whole {
            min: 0,
            max: u64::MAX,
        }
    }

    /// A whole number from `min` to `max`.
    pub const fn range(min: u64, max: u64) -> Whole {
        Whole { min, max }
    }

    /// Parses `value`, the value of the setting `name`.
    pub fn parse(&self, name: &str, value: &str) -> Result<u64, String> {
        let Whole { min, max } = *self;
        match value.trim().parse::<u64>() {
            Ok(n) if (min..=max).contains(&n) => Ok(n),
            _ if max == u64::MAX && min == 0 => {
                Err(format!("{name} must be a whole number, not {value:?}"))
            }
            _ if max == u64::MAX => Err(format!(
                "{name} must be a whole number of at least {min}, not {value:?}"
            )),
            _ => Err(format!(
                "{name} must be a whole number from {min} to {max}, not {value:?}"
            )),
        }
    }
}

/// A value `check` parses from the setting's name and value.
pub struct Checked<T>(fn(&str, &str) -> Result<T, String>);

impl<T> Checked<T> {
    /// The parser of `check`.
    pub const fn new(check: fn(&str, &str) -> Result<T, String>) -> Checked<T> {
        Checked(check)
    }
}

impl<T> Clone for Checked<T> {
    fn clone(&self) -> Self {
        Checked(self.0)
    }
}

/// The name errors give an argument: its environment variable, else its
/// flag.
fn setting_name(arg: Option<&Arg>) -> String {
    match arg {
        Some(arg) => match (arg.get_env(), arg.get_long()) {
            (Some(env), _) => env.to_string_lossy().into_owned(),
            (None, Some(long)) => format!("--{long}"),
            (None, None) => arg.get_id().to_string(),
        },
        None => "the value".to_owned(),
    }
}

/// Runs `parse` on `value` as text, an error as clap's.
fn run<T>(
    cmd: &Command,
    arg: Option<&Arg>,
    value: &OsStr,
    parse: impl FnOnce(&str, &str) -> Result<T, String>,
) -> Result<T, clap::Error> {
    let name = setting_name(arg);
    let parsed = match value.to_str() {
        Some(text) => parse(&name, text),
        None => Err(format!("{name} is not valid UTF-8")),
    };
    parsed.map_err(|message| cmd.clone().error(ErrorKind::ValueValidation, message))
}

impl TypedValueParser for Durations {
    type Value = Duration;

    fn parse_ref(
        &self,
        cmd: &Command,
        arg: Option<&Arg>,
        value: &OsStr,
    ) -> Result<Duration, clap::Error> {
        run(cmd, arg, value, |name, text| self.parse(name, text))
    }
}

impl TypedValueParser for Whole {
    type Value = u64;

    fn parse_ref(
        &self,
        cmd: &Command,
        arg: Option<&Arg>,
        value: &OsStr,
    ) -> Result<u64, clap::Error> {
        run(cmd, arg, value, |name, text| self.parse(name, text))
    }
}

impl<T: Clone + Send + Sync + 'static> TypedValueParser for Checked<T> {
    type Value = T;

    fn parse_ref(&self, cmd: &Command, arg: Option<&Arg>, value: &OsStr) -> Result<T, clap::Error> {
        run(cmd, arg, value, self.0)
    }
}
