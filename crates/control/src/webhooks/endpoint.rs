//! Which URLs a webhook may name (contract 3.13): checked when a webhook is
//! created or given a new url (the api-server) and again before every
//! attempt (the worker), so a rule or a `BC_WEBHOOK_ENDPOINTS` changed
//! since, or a url stored before a rule existed, is refused at use. Names
//! that resolve to internal addresses are the connect-time guard's to
//! refuse (`providers::outbound`); the IP literals it never sees are
//! refused here.

use std::net::IpAddr;

use providers::Origins;
use providers::policy::is_internal;

/// Why a url is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refused {
    /// Not a URL at all.
    NotUrl,
    /// Not an `http` or `https` URL with a host.
    Scheme,
    /// It carries a user or a password.
    Credentials,
    /// Another tenant than root names `http` on an origin not listed.
    NotHttps,
    /// Another tenant than root names `localhost` or an internal address
    /// literal on an origin not listed.
    Internal,
}

impl Refused {
    /// What the rule is, for an error or a log line (never the url).
    pub fn message(self) -> &'static str {
        match self {
            Refused::NotUrl => "url is not a URL",
            Refused::Scheme => "a webhook's url must be an http or https URL",
            Refused::Credentials => "a webhook's url carries no user or password",
            Refused::NotHttps => {
                "a webhook's url must be https unless BC_WEBHOOK_ENDPOINTS lists its origin"
            }
            Refused::Internal => {
                "a webhook's url must not name a loopback, private or otherwise internal host \
                 unless BC_WEBHOOK_ENDPOINTS lists its origin"
            }
        }
    }
}

/// `raw` checked against the rules of contract 3.13 for a webhook of the
/// root tenant (`root`) or of another: an `http` or `https` URL without
/// user or password; for tenants other than root, `https` and a host that
/// is neither `localhost` nor an internal address literal, unless `listed`
/// names its origin. Answers the URL as it is sent.
pub fn checked(raw: &str, root: bool, listed: &Origins) -> Result<reqwest::Url, Refused> {
    let url = reqwest::Url::parse(raw).map_err(|_| Refused::NotUrl)?;
    let Some(host) = url
        .host_str()
        .filter(|_| matches!(url.scheme(), "http" | "https"))
        .map(str::to_owned)
    else {
        return Err(Refused::Scheme);
    };
    if !url.username().is_empty() || url.password().is_some() {
        return Err(Refused::Credentials);
    }
    if root || listed.lists(&url) {
        return Ok(url);
    }
    if url.scheme() != "https" {
        return Err(Refused::NotHttps);
    }
    if !host_allowed(&host) {
        return Err(Refused::Internal);
    }
    Ok(url)
}

/// Whether a tenant other than root may name `host` (as a URL shows it:
/// an IPv6 literal in brackets) without its origin listed: not `localhost`
/// and not an internal address literal.
fn host_allowed(host: &str) -> bool {
    let bare = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    match bare.parse::<IpAddr>() {
        Ok(ip) => !is_internal(ip),
        Err(_) => {
            let name = host.trim_end_matches('.').to_ascii_lowercase();
            name != "localhost" && !name.ends_with(".localhost")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn origins(list: &str) -> Origins {
        Origins::parse("BC_WEBHOOK_ENDPOINTS", list).expect("origins")
    }

    fn refused(raw: &str, root: bool, listed: &Origins) -> Option<Refused> {
        checked(raw, root, listed).err()
    }

    #[test]
    fn tenants_name_https_off_internal_hosts_unless_listed() {
        let none = Origins::default();
        for url in [
            "https://127.0.0.1/x",
            "https://10.0.0.1/x",
            "https://[::1]/x",
            "https://[::ffff:192.168.1.1]/x",
            "https://169.254.169.254/latest",
            "https://0.0.0.0/x",
            "https://localhost/x",
            "https://LocalHost./x",
            "https://a.localhost/x",
        ] {
            assert_eq!(refused(url, false, &none), Some(Refused::Internal), "{url}");
        }
        assert_eq!(
            refused("http://example.com/x", false, &none),
            Some(Refused::NotHttps)
        );
        assert_eq!(
            refused("ftp://example.com/x", false, &none),
            Some(Refused::Scheme)
        );
        assert_eq!(
            refused("https://user:pw@example.com/x", false, &none),
            Some(Refused::Credentials)
        );
        assert_eq!(refused("not a url", false, &none), Some(Refused::NotUrl));
        assert_eq!(refused("https://hooks.example.com/x", false, &none), None);
        assert_eq!(refused("https://93.184.216.34/x", false, &none), None);
        // Listed origins pass whatever their scheme or address.
        let listed = origins("http://127.0.0.1:9");
        assert_eq!(refused("http://127.0.0.1:9/x", false, &listed), None);
        assert_eq!(
            refused("http://127.0.0.1:10/x", false, &listed),
            Some(Refused::NotHttps)
        );
        // Root names any http or https URL.
        assert_eq!(refused("http://127.0.0.1:9/x", true, &none), None);
        assert_eq!(
            refused("ftp://127.0.0.1/x", true, &none),
            Some(Refused::Scheme)
        );
    }

    #[test]
    fn the_url_is_answered_as_sent() {
        let url = checked(
            "https://Hooks.Example.com/a?b=1",
            false,
            &Origins::default(),
        )
        .expect("allowed");
        assert_eq!(url.as_str(), "https://hooks.example.com/a?b=1");
    }
}
