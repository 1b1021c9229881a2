//! The connect-time address guard of tenant accounts (contract 3.5).
//!
//! A tenant account's endpoint must be a listed origin, but a listed name
//! can resolve anywhere, and DNS is not the platform's. So the adapter of a
//! tenant account never connects to an internal address (see
//! [`is_internal`]) unless the host is itself listed in
//! `BC_PROVIDER_ENDPOINTS` by IP or as `localhost`
//! ([`crate::policy::ProviderPolicy`]). Two checks make that hold:
//!
//! - [`GuardedResolver`], the HTTP client's resolver: it resolves a name with
//!   tokio's `lookup_host` (or a static override) and drops internal
//!   addresses; if none remain the connection fails with [`AddressRefused`].
//! - [`check_ip_literal`], before each request: reqwest does not call the
//!   resolver for an IP-literal host.
//!
//! Tenant clients also ignore environment proxies (a proxy would connect for
//! them, unguarded) and never follow redirects.

use std::collections::BTreeMap;
use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use reqwest::dns::{Addrs, Name, Resolve, Resolving};

use crate::ProviderError;
use crate::policy::{ProviderPolicy, ip_of_host};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Whether a tenant account's adapter must not connect to `ip`.
///
/// Refused:
/// - IPv4: loopback (127.0.0.0/8), private (RFC 1918: 10.0.0.0/8,
///   172.16.0.0/12, 192.168.0.0/16), link-local (169.254.0.0/16, which holds
///   the cloud metadata servers), "this network" (0.0.0.0/8, the unspecified
///   address included), shared address space (100.64.0.0/10, carrier-grade
///   NAT), IETF protocol assignments (192.0.0.0/24), benchmarking
///   (198.18.0.0/15), multicast (224.0.0.0/4) and reserved (240.0.0.0/4,
///   the broadcast address 255.255.255.255 included).
/// - IPv6: loopback (`::1`), unspecified (`::`), link-local (fe80::/10),
///   unique local (fc00::/7), the deprecated site-local (fec0::/10),
///   multicast (ff00::/8) and the local-use NAT64 prefix (64:ff9b:1::/48,
///   RFC 8215) whole: the site's own translator decides where an IPv4
///   address sits inside it, so no embedded address can be read from it.
/// - IPv6 addresses that carry an IPv4 address at a fixed place are judged
///   by that address: IPv4-mapped (`::ffff:a.b.c.d`), IPv4-translated
///   (`::ffff:0:a.b.c.d`), IPv4-compatible (`::a.b.c.d`), well-known NAT64
///   (64:ff9b::/96) and 6to4 (2002:AABB:CCDD::/48 carries a.b.c.d).
pub(crate) fn is_internal(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => is_internal_v4(v4),
        IpAddr::V6(v6) => is_internal_v6(v6),
    }
}

/// IPv4 ranges refused besides those std names (`is_loopback`, ...):
/// (network, prefix length).
const INTERNAL_V4: [(Ipv4Addr, u32); 5] = [
    (Ipv4Addr::new(0, 0, 0, 0), 8),
    (Ipv4Addr::new(100, 64, 0, 0), 10),
    (Ipv4Addr::new(192, 0, 0, 0), 24),
    (Ipv4Addr::new(198, 18, 0, 0), 15),
    (Ipv4Addr::new(240, 0, 0, 0), 4),
];

fn in_v4_net(ip: Ipv4Addr, (net, len): (Ipv4Addr, u32)) -> bool {
    let mask = u32::MAX.checked_shl(32 - len).unwrap_or(0);
    u32::from(ip) & mask == u32::from(net)
}

fn is_internal_v4(ip: Ipv4Addr) -> bool {
    ip.is_loopback()
        || ip.is_private()
        || ip.is_link_local()
        || ip.is_multicast()
        || ip.is_broadcast()
        || INTERNAL_V4.iter().any(|net| in_v4_net(ip, *net))
}

/// The IPv4 address in segments `hi` and `lo` of an IPv6 address.
fn v4_of(hi: u16, lo: u16) -> Ipv4Addr {
    Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo))
}

fn is_internal_v6(ip: Ipv6Addr) -> bool {
    let s = ip.segments();
    let embedded = match s {
        // ::ffff:a.b.c.d (mapped) and ::ffff:0:a.b.c.d (translated).
        [0, 0, 0, 0, 0, 0xffff, hi, lo] | [0, 0, 0, 0, 0xffff, 0, hi, lo] => Some(v4_of(hi, lo)),
        // ::a.b.c.d (compatible; `::` and `::1` included) and the
        // well-known NAT64 prefix 64:ff9b::/96.
        [0, 0, 0, 0, 0, 0, hi, lo] | [0x64, 0xff9b, 0, 0, 0, 0, hi, lo] => Some(v4_of(hi, lo)),
        // 6to4: 2002:AABB:CCDD::/48.
        [0x2002, hi, lo, ..] => Some(v4_of(hi, lo)),
        _ => None,
    };
    if let Some(v4) = embedded {
        return is_internal_v4(v4);
    }
    ip.is_loopback()
        || ip.is_unspecified()
        || ip.is_unicast_link_local()
        || ip.is_unique_local()
        || (s[0] & 0xffc0) == 0xfec0
        || ip.is_multicast()
        || s[..3] == [0x64, 0xff9b, 1]
}

/// A name that resolved only to addresses the guard refuses. Travels inside
/// the HTTP client's connect error and becomes [`ProviderError::NotAllowed`].
#[derive(Debug)]
pub(crate) struct AddressRefused {
    host: String,
    refused: Vec<IpAddr>,
}

impl fmt::Display for AddressRefused {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "refusing to connect to {}: a tenant account may not reach its addresses (",
            self.host
        )?;
        for (i, ip) in self.refused.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{ip}")?;
        }
        f.write_str("), which are internal")
    }
}

impl std::error::Error for AddressRefused {}

/// The resolver of every adapter client: static overrides first, then
/// `lookup_host`; for a tenant account, internal addresses are dropped.
#[derive(Debug, Clone)]
pub(crate) struct GuardedResolver {
    /// `Some` for a tenant account: filter by [`is_internal`] unless the
    /// policy exempts the name.
    guard: Option<Arc<ProviderPolicy>>,
    /// Lower-case names; their addresses go through the filter all the same.
    overrides: Arc<BTreeMap<String, Vec<IpAddr>>>,
}

impl GuardedResolver {
    pub(crate) fn new(
        guard: Option<Arc<ProviderPolicy>>,
        overrides: &BTreeMap<String, Vec<IpAddr>>,
    ) -> Self {
        let overrides = overrides
            .iter()
            .map(|(name, ips)| (name.to_ascii_lowercase(), ips.clone()))
            .collect();
        GuardedResolver {
            guard,
            overrides: Arc::new(overrides),
        }
    }

    /// The addresses the client may connect to for `host` (ports 0: the
    /// client fills in the URL's).
    pub(crate) async fn lookup(&self, host: &str) -> Result<Vec<SocketAddr>, BoxError> {
        let host = host.to_ascii_lowercase();
        let addrs: Vec<SocketAddr> = match self.overrides.get(&host) {
            Some(ips) => ips.iter().map(|ip| SocketAddr::new(*ip, 0)).collect(),
            None => tokio::net::lookup_host((host.as_str(), 0)).await?.collect(),
        };
        let Some(policy) = &self.guard else {
            return Ok(addrs);
        };
        if policy.guard_exempt(&host) {
            return Ok(addrs);
        }
        let (refused, allowed): (Vec<SocketAddr>, Vec<SocketAddr>) =
            addrs.into_iter().partition(|a| is_internal(a.ip()));
        if allowed.is_empty() && !refused.is_empty() {
            return Err(Box::new(AddressRefused {
                host,
                refused: refused.iter().map(SocketAddr::ip).collect(),
            }));
        }
        if !refused.is_empty() {
            tracing::warn!(
                %host,
                refused = ?refused.iter().map(SocketAddr::ip).collect::<Vec<_>>(),
                "dropped internal addresses of a tenant account's endpoint"
            );
        }
        Ok(allowed)
    }
}

impl Resolve for GuardedResolver {
    fn resolve(&self, name: Name) -> Resolving {
        let this = self.clone();
        let host = name.as_str().to_owned();
        Box::pin(async move {
            let addrs = this.lookup(&host).await?;
            Ok(Box::new(addrs.into_iter()) as Addrs)
        })
    }
}

/// Refuses a tenant account's request to an internal IP-literal host that
/// the policy does not exempt (the resolver never sees IP literals).
pub(crate) fn check_ip_literal(
    url: &reqwest::Url,
    policy: &ProviderPolicy,
) -> Result<(), ProviderError> {
    let Some(host) = url.host_str() else {
        return Ok(());
    };
    match ip_of_host(host) {
        Some(ip) if is_internal(ip) && !policy.guard_exempt(host) => {
            Err(ProviderError::NotAllowed(format!(
                "refusing to connect to {host}: a tenant account may not reach an internal address"
            )))
        }
        _ => Ok(()),
    }
}

/// The guard's refusal inside a client error, if that is what it is.
pub(crate) fn refusal_in<'a>(
    error: &'a (dyn std::error::Error + 'static),
) -> Option<&'a AddressRefused> {
    let mut current = Some(error);
    while let Some(err) = current {
        if let Some(refused) = err.downcast_ref::<AddressRefused>() {
            return Some(refused);
        }
        current = err.source();
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("an address")
    }

    #[test]
    fn internal_addresses() {
        for s in [
            "127.0.0.1",
            "127.255.255.254",
            "10.0.0.1",
            "10.255.255.255",
            "172.16.0.1",
            "172.31.255.255",
            "192.168.0.1",
            "192.168.255.255",
            "169.254.169.254",
            "169.254.0.1",
            "0.0.0.0",
            "0.1.2.3",
            "100.64.0.1",
            "100.127.255.255",
            "224.0.0.1",
            "239.255.255.250",
            "255.255.255.255",
            "::1",
            "::",
            "fe80::1",
            "febf::1",
            "fc00::1",
            "fd12:3456::1",
            "fec0::1",
            "ff02::1",
            "::ffff:127.0.0.1",
            "::ffff:10.1.2.3",
            "::ffff:169.254.169.254",
            "::127.0.0.1",
            "64:ff9b::a9fe:a9fe",
            "64:ff9b::7f00:1",
        ] {
            assert!(is_internal(ip(s)), "{s} should be refused");
        }
    }

    /// The ranges the guard missed before: each is refused at its edges, in
    /// every IPv6 embedding, and its neighbours stay allowed.
    #[test]
    fn reserved_and_special_purpose_v4_ranges_are_internal() {
        for s in [
            "192.0.0.0",
            "192.0.0.170",
            "192.0.0.255",
            "198.18.0.0",
            "198.19.255.255",
            "240.0.0.1",
            "250.1.2.3",
            "255.255.255.254",
        ] {
            assert!(is_internal(ip(s)), "{s} should be refused");
            let v4: Ipv4Addr = s.parse().expect("an IPv4 address");
            let [a, b, c, d] = v4.octets();
            let (hi, lo) = (u16::from_be_bytes([a, b]), u16::from_be_bytes([c, d]));
            for v6 in [
                format!("::ffff:{s}"),
                format!("::ffff:0:{s}"),
                format!("::{s}"),
                format!("64:ff9b::{s}"),
                format!("2002:{hi:x}:{lo:x}::1"),
            ] {
                assert!(is_internal(ip(&v6)), "{v6} should be refused");
            }
        }
        for s in [
            "192.0.1.0",
            "191.255.255.255",
            "198.17.255.255",
            "198.20.0.0",
        ] {
            assert!(!is_internal(ip(s)), "{s} should be allowed");
        }
    }

    #[test]
    fn ipv4_embeddings_are_judged_by_their_ipv4_address() {
        for internal in [
            "127.0.0.1",
            "10.1.2.3",
            "169.254.169.254",
            "100.64.0.1",
            "0.0.0.0",
        ] {
            let v4: Ipv4Addr = internal.parse().expect("an IPv4 address");
            let [a, b, c, d] = v4.octets();
            let (hi, lo) = (u16::from_be_bytes([a, b]), u16::from_be_bytes([c, d]));
            for v6 in [
                format!("::ffff:{internal}"),
                format!("::ffff:0:{internal}"),
                format!("::{internal}"),
                format!("64:ff9b::{internal}"),
                format!("2002:{hi:x}:{lo:x}::"),
                format!("2002:{hi:x}:{lo:x}:ffff:ffff:ffff:ffff:ffff"),
            ] {
                assert!(is_internal(ip(&v6)), "{v6} should be refused");
            }
        }
        for public in ["8.8.8.8", "142.250.74.10", "1.1.1.1"] {
            let v4: Ipv4Addr = public.parse().expect("an IPv4 address");
            let [a, b, c, d] = v4.octets();
            let (hi, lo) = (u16::from_be_bytes([a, b]), u16::from_be_bytes([c, d]));
            for v6 in [
                format!("::ffff:{public}"),
                format!("::ffff:0:{public}"),
                format!("::{public}"),
                format!("64:ff9b::{public}"),
                format!("2002:{hi:x}:{lo:x}::1"),
            ] {
                assert!(!is_internal(ip(&v6)), "{v6} should be allowed");
            }
        }
    }

    /// The local-use NAT64 prefix is refused whole, whatever its low bits.
    #[test]
    fn local_use_nat64_prefix_is_internal() {
        for s in [
            "64:ff9b:1::",
            "64:ff9b:1::808:808",
            "64:ff9b:1:ffff:ffff:ffff:ffff:ffff",
        ] {
            assert!(is_internal(ip(s)), "{s} should be refused");
        }
        for s in ["64:ff9b:2::808:808", "64:ff9b:0:1::808:808"] {
            assert!(!is_internal(ip(s)), "{s} should be allowed");
        }
    }

    #[test]
    fn public_addresses() {
        for s in [
            "8.8.8.8",
            "142.250.74.10",
            "172.15.255.255",
            "172.32.0.1",
            "192.169.0.1",
            "169.253.255.255",
            "100.63.255.255",
            "100.128.0.1",
            "1.0.0.1",
            "223.255.255.255",
            "2001:4860:4860::8888",
            "2a00:1450:4001::200e",
            "fbff::1",
            "fe7f::1",
            "::ffff:8.8.8.8",
            "64:ff9b::808:808",
            "2002:808:808::1",
        ] {
            assert!(!is_internal(ip(s)), "{s} should be allowed");
        }
    }
}
