//! Origins `scheme://host[:port]`: their syntax and matching, as
//! `BC_PROVIDER_ENDPOINTS` lists them, and [`Origins`], a list in that
//! syntax for other endpoints the platform calls out to
//! (`BC_WEBHOOK_ENDPOINTS`), with the same matching and the same exemption
//! from the address guard.

use std::fmt;
use std::net::IpAddr;

use super::{PolicyError, items, policy_error};

/// Origins `scheme://host[:port]` (`*` as the port matches any), parsed as
/// `BC_PROVIDER_ENDPOINTS` is: comma-separated, items trimmed, empty items
/// skipped. Unset or empty: none.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct Origins(Vec<Origin>);

impl fmt::Debug for Origins {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(Origin::to_string))
            .finish()
    }
}

impl Origins {
    /// The origins of `value`, the value of `variable` (named in errors,
    /// which never quote the value).
    pub fn parse(variable: &'static str, value: &str) -> Result<Origins, PolicyError> {
        items(value)
            .map(|(n, item)| {
                parse_origin(item).map_err(|why| {
                    policy_error(variable, format!("item {n} is not an origin: {why}"))
                })
            })
            .collect::<Result<_, _>>()
            .map(Origins)
    }

    /// The origins of the environment variable `variable` (unset: none).
    pub fn from_env(variable: &'static str) -> Result<Origins, PolicyError> {
        match std::env::var(variable) {
            Ok(value) => Origins::parse(variable, &value),
            Err(std::env::VarError::NotPresent) => Ok(Origins::default()),
            Err(std::env::VarError::NotUnicode(_)) => {
                Err(policy_error(variable, "is not valid UTF-8"))
            }
        }
    }

    /// Whether the origin of `url` is listed (scheme, host compared
    /// case-insensitively, port with the scheme's default filled in).
    pub fn lists(&self, url: &reqwest::Url) -> bool {
        match (url.host_str(), url.port_or_known_default()) {
            (Some(host), Some(port)) => origin_listed(&self.0, url.scheme(), host, port),
            _ => false,
        }
    }

    /// Whether `host` is itself listed, by IP or as `localhost`: then the
    /// connect-time address guard lets it through whatever its addresses.
    pub fn exempts(&self, host: &str) -> bool {
        host_exempt(&self.0, host)
    }
}

/// An origin listed in `BC_PROVIDER_ENDPOINTS`.
#[derive(Clone, PartialEq, Eq)]
pub(super) struct Origin {
    /// `http` or `https`.
    scheme: String,
    /// As the URL parser normalises it: lower-case, IPv6 in brackets.
    host: String,
    /// `None` for `*` (any port); otherwise the port, the scheme's default
    /// filled in.
    port: Option<u16>,
}

impl fmt::Display for Origin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.port {
            Some(port) => write!(f, "{}://{}:{port}", self.scheme, self.host),
            None => write!(f, "{}://{}:*", self.scheme, self.host),
        }
    }
}

/// Whether `origins` list the origin (`scheme`, `host` compared
/// case-insensitively, `port` with the scheme's default filled in; a `*`
/// port matches any).
pub(super) fn origin_listed(origins: &[Origin], scheme: &str, host: &str, port: u16) -> bool {
    origins.iter().any(|o| {
        o.scheme == scheme && o.host.eq_ignore_ascii_case(host) && o.port.is_none_or(|p| p == port)
    })
}

/// Whether `host` is itself listed in `origins`, by IP or as `localhost`:
/// the connect-time address guard lets it through whatever its addresses.
pub(super) fn host_exempt(origins: &[Origin], host: &str) -> bool {
    let ip = ip_of_host(host);
    if ip.is_none() && !host.eq_ignore_ascii_case("localhost") {
        return false;
    }
    origins.iter().any(|o| match ip {
        Some(ip) => ip_of_host(&o.host) == Some(ip),
        None => o.host.eq_ignore_ascii_case(host),
    })
}

/// The address of an IP-literal host (`127.0.0.1`, `[::1]`), `None` for a name.
pub(crate) fn ip_of_host(host: &str) -> Option<IpAddr> {
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    bare.parse().ok()
}

/// `scheme://host[:port]`, `*` allowed as the port. The reason names no part
/// of the item.
pub(super) fn parse_origin(item: &str) -> Result<Origin, &'static str> {
    let (base, any_port) = match item.strip_suffix(":*") {
        Some(base) => (base, true),
        None => (item, false),
    };
    let url = reqwest::Url::parse(base).map_err(|_| "expected scheme://host[:port]")?;
    if !matches!(url.scheme(), "http" | "https") {
        return Err("the scheme must be http or https");
    }
    let host = url.host_str().filter(|h| !h.is_empty()).ok_or("no host")?;
    if !url.username().is_empty() || url.password().is_some() {
        return Err("an origin carries no user or password");
    }
    if url.path() != "/" || url.query().is_some() || url.fragment().is_some() {
        return Err("an origin has no path, query or fragment");
    }
    if any_port && url.port().is_some() {
        return Err("both a port and *");
    }
    let port = if any_port {
        None
    } else {
        Some(url.port_or_known_default().ok_or("no port")?)
    };
    Ok(Origin {
        scheme: url.scheme().to_owned(),
        host: host.to_ascii_lowercase(),
        port,
    })
}

/// Whether the platform must not connect to `ip` on a tenant's behalf:
/// loopback, private, link-local, unspecified, multicast and the other
/// internal ranges the provider adapters' guard refuses (see the crate docs).
pub fn is_internal(ip: IpAddr) -> bool {
    crate::guard::is_internal(ip)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn url(s: &str) -> reqwest::Url {
        reqwest::Url::parse(s).expect("url")
    }

    #[test]
    fn origins_match_as_provider_endpoints_do() {
        let o = Origins::parse(
            "BC_WEBHOOK_ENDPOINTS",
            " http://127.0.0.1:9 , https://a.test:*,",
        )
        .expect("origins");
        assert!(o.lists(&url("http://127.0.0.1:9/hook")));
        assert!(!o.lists(&url("http://127.0.0.1:10/hook")));
        assert!(o.lists(&url("https://A.test:8443/x")));
        assert!(!o.lists(&url("http://a.test/x")));
        assert!(o.exempts("127.0.0.1"));
        assert!(!o.exempts("a.test"), "a name is never exempt");
        assert!(!Origins::default().lists(&url("https://a.test/")));
    }

    #[test]
    fn a_bad_item_names_the_variable_not_the_value() {
        let e = Origins::parse("BC_WEBHOOK_ENDPOINTS", "https://ok.test, ftp://secret")
            .expect_err("refused");
        assert_eq!(e.variable, "BC_WEBHOOK_ENDPOINTS");
        assert!(e.problem.starts_with("item 2"), "{}", e.problem);
        assert!(!e.to_string().contains("secret"));
    }

    #[test]
    fn internal_addresses_are_those_of_the_guard() {
        for ip in [
            "127.0.0.1",
            "10.0.0.1",
            "::1",
            "169.254.169.254",
            "0.0.0.0",
            "224.0.0.1",
        ] {
            assert!(is_internal(ip.parse().expect("ip")), "{ip}");
        }
        assert!(!is_internal("93.184.216.34".parse().expect("ip")));
    }
}
