//! Where a jailed process's connection may go: the address guard of the network proxy.
//!
//! The rule is fetch_url's (orchestrator-tools/src/tools/fetch.rs): public addresses are
//! allowed; loopback, private, link-local (the cloud metadata address among them), shared
//! (CGNAT), unique-local, multicast, reserved and unspecified addresses are refused, IPv4 ones
//! carried in IPv6 included, and metadata host names are refused by name. A person lifts the
//! rule for a host by listing it in the task's `network_hosts` (`host` or `host:port`).
//!
//! The check is made on the addresses a name resolves to, and the proxy connects to one of the
//! addresses that passed: the name is resolved once, here, so it cannot resolve to a public
//! address for the check and to a private one for the connection (DNS rebinding).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Host names of cloud metadata services, refused by name whatever they resolve to.
const METADATA_HOSTS: &[&str] = &[
    "metadata",
    "metadata.google.internal",
    "metadata.goog",
    "instance-data",
    "instance-data.ec2.internal",
];

/// What a refusal tells the program (and the model reading its error).
pub const LISTING_HINT: &str = "the sandbox's proxy reaches public addresses only, unless the task's policy lists the host in network_hosts (\"host\" or \"host:port\")";

/// The hosts a task's policy lists, parsed once.
#[derive(Debug, Clone, Default)]
pub struct HostList {
    entries: Vec<Entry>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    host: Host,
    port: Option<u16>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Host {
    Ip(IpAddr),
    /// Lower-case, without a trailing dot.
    Name(String),
}

impl Host {
    fn parse(text: &str) -> Host {
        let bare = text.trim_start_matches('[').trim_end_matches(']');
        match bare.parse::<IpAddr>() {
            Ok(ip) => Host::Ip(ip),
            Err(_) => Host::Name(bare.trim_end_matches('.').to_ascii_lowercase()),
        }
    }
}

impl HostList {
    /// Parses `network_hosts` entries: `name`, `name:port`, `1.2.3.4`, `1.2.3.4:80`, `::1`,
    /// `[::1]` or `[::1]:8080`. An entry that is none of these matches nothing.
    pub fn new(entries: &[String]) -> Self {
        let entries = entries
            .iter()
            .filter_map(|entry| parse_entry(entry.trim()))
            .collect();
        HostList { entries }
    }

    /// Whether the list names `host` (as a client spelled it) on `port`.
    pub fn names(&self, host: &str, port: u16) -> bool {
        let host = Host::parse(host);
        self.entries
            .iter()
            .any(|e| e.host == host && e.port.is_none_or(|p| p == port))
    }

    /// Whether the list names the address `addr` itself (so a name that resolves to a listed
    /// address reaches the same place the person allowed).
    fn names_address(&self, addr: SocketAddr) -> bool {
        let ip = canonical_ip(addr.ip());
        self.entries.iter().any(|e| {
            matches!(e.host, Host::Ip(listed) if canonical_ip(listed) == ip)
                && e.port.is_none_or(|p| p == addr.port())
        })
    }
}

fn parse_entry(entry: &str) -> Option<Entry> {
    if entry.is_empty() {
        return None;
    }
    // `[v6]` or `[v6]:port`.
    if let Some(rest) = entry.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        let ip: Ipv6Addr = inside.parse().ok()?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':')?.parse().ok()?),
        };
        return Some(Entry {
            host: Host::Ip(IpAddr::V6(ip)),
            port,
        });
    }
    // A bare IPv6 address has more than one colon and no port.
    if let Ok(ip) = entry.parse::<IpAddr>() {
        return Some(Entry {
            host: Host::Ip(ip),
            port: None,
        });
    }
    match entry.rsplit_once(':') {
        Some((host, port)) => Some(Entry {
            host: Host::parse(host),
            port: Some(port.parse().ok()?),
        }),
        None => Some(Entry {
            host: Host::parse(entry),
            port: None,
        }),
    }
}

/// An IPv4-mapped IPv6 address as the IPv4 address it is, so `::ffff:127.0.0.1` and
/// `127.0.0.1` compare equal.
fn canonical_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// The decision about a host before it is resolved: refused by name or by its literal address,
/// or go on and resolve.
pub(crate) fn check_host(list: &HostList, host: &str, port: u16) -> Result<(), String> {
    if list.names(host, port) {
        return Ok(());
    }
    if let Host::Ip(ip) = Host::parse(host) {
        if let Some(why) = forbidden(ip)
            && !list.names_address(SocketAddr::new(ip, port))
        {
            return Err(format!("{ip} is {why}; {LISTING_HINT}"));
        }
        return Ok(());
    }
    let name = host.trim_end_matches('.').to_ascii_lowercase();
    if METADATA_HOSTS.contains(&name.as_str()) {
        return Err(format!(
            "{host} is the name of a cloud metadata service; {LISTING_HINT}"
        ));
    }
    Ok(())
}

/// The resolved addresses of `host` that may be connected to: all of them when the list names
/// the host, else those that are public or that the list names by address. An empty result comes
/// with the reason.
pub(crate) fn permitted(
    list: &HostList,
    host: &str,
    port: u16,
    resolved: &[SocketAddr],
) -> Result<Vec<SocketAddr>, String> {
    if list.names(host, port) {
        return Ok(resolved.to_vec());
    }
    let allowed: Vec<SocketAddr> = resolved
        .iter()
        .copied()
        .filter(|a| forbidden(a.ip()).is_none() || list.names_address(*a))
        .collect();
    if !allowed.is_empty() {
        return Ok(allowed);
    }
    let found: Vec<String> = resolved
        .iter()
        .filter_map(|a| forbidden(a.ip()).map(|why| format!("{} ({why})", a.ip())))
        .collect();
    Err(if found.is_empty() {
        format!("{host} resolves to no address")
    } else {
        format!("{host} resolves to {}; {LISTING_HINT}", found.join(", "))
    })
}

/// Why a jailed process must not connect to `ip` on its own: `Some("a loopback address")`, or
/// `None` for an address on the public internet. IPv4 addresses carried in IPv6 ones (mapped,
/// compatible, NAT64, 6to4) are judged as the IPv4 address they reach.
///
/// Every address of this machine's own interfaces is refused too, whatever its range (a public
/// address on `eth0`, a documentation range a test network uses): a service bound to 0.0.0.0 (the
/// daemon's own listener, a database) answers on it. The list is read again when it is older
/// than [`LOCAL_REFRESH`], so an address added while the daemon runs is refused within seconds.
pub fn forbidden(ip: IpAddr) -> Option<&'static str> {
    let own = match ip {
        IpAddr::V4(v4) => forbidden_v4(v4),
        IpAddr::V6(v6) => match embedded_v4(v6) {
            Some(v4) => forbidden_v4(v4),
            None => forbidden_v6(v6),
        },
    };
    own.or_else(|| {
        let v4 = match ip {
            IpAddr::V6(v6) => embedded_v4(v6).map(IpAddr::V4),
            IpAddr::V4(_) => None,
        };
        let locals = local_addresses();
        (locals.contains(&ip) || v4.is_some_and(|v4| locals.contains(&v4)))
            .then_some("an address of this machine")
    })
}

/// How long the list of this machine's addresses is used before it is read again.
pub const LOCAL_REFRESH: std::time::Duration = std::time::Duration::from_secs(5);

/// The addresses of this machine's interfaces, read at most every [`LOCAL_REFRESH`]. When they
/// cannot be read, the last list read is kept (empty before the first).
pub fn local_addresses() -> std::sync::Arc<std::collections::HashSet<IpAddr>> {
    use std::sync::{Arc, Mutex};
    type Cached = Option<(std::time::Instant, Arc<std::collections::HashSet<IpAddr>>)>;
    static CACHE: Mutex<Cached> = Mutex::new(None);
    let mut cache = CACHE
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if let Some((read, list)) = cache.as_ref()
        && read.elapsed() < LOCAL_REFRESH
    {
        return list.clone();
    }
    let list = match nix::ifaddrs::getifaddrs() {
        Ok(interfaces) => Arc::new(
            interfaces
                .filter_map(|i| i.address)
                .filter_map(|a| {
                    if let Some(v4) = a.as_sockaddr_in() {
                        Some(IpAddr::V4(v4.ip()))
                    } else {
                        a.as_sockaddr_in6().map(|v6| IpAddr::V6(v6.ip()))
                    }
                })
                .collect(),
        ),
        Err(e) => {
            tracing::warn!(error = %e, "cannot list this machine's addresses; keeping the last list");
            cache.as_ref().map(|(_, l)| l.clone()).unwrap_or_default()
        }
    };
    *cache = Some((std::time::Instant::now(), list.clone()));
    list
}

fn forbidden_v4(ip: Ipv4Addr) -> Option<&'static str> {
    let [a, b, c, _] = ip.octets();
    Some(if a == 0 {
        "an unspecified (0.0.0.0/8) address"
    } else if ip.is_loopback() {
        "a loopback address"
    } else if ip.is_private() {
        "a private (RFC 1918) address"
    } else if ip == Ipv4Addr::new(169, 254, 169, 254) {
        "the cloud metadata address"
    } else if ip.is_link_local() {
        "a link-local address"
    } else if a == 100 && (64..128).contains(&b) {
        "a carrier-grade NAT (100.64.0.0/10) address"
    } else if a == 192 && b == 0 && c == 0 {
        "an IETF protocol (192.0.0.0/24) address"
    } else if (a, b, c) == (192, 0, 2) || (a, b, c) == (198, 51, 100) || (a, b, c) == (203, 0, 113)
    {
        "a documentation (TEST-NET) address"
    } else if a == 198 && (b == 18 || b == 19) {
        "a benchmarking (198.18.0.0/15) address"
    } else if (a, b, c) == (192, 88, 99) {
        "a 6to4 relay anycast (192.88.99.0/24) address"
    } else if ip.is_multicast() {
        "a multicast address"
    } else if a >= 240 {
        "a reserved or broadcast address"
    } else {
        return None;
    })
}

fn forbidden_v6(ip: Ipv6Addr) -> Option<&'static str> {
    let first = ip.segments()[0];
    Some(if ip.is_unspecified() {
        "the unspecified address"
    } else if ip.is_loopback() {
        "a loopback address"
    } else if first & 0xfe00 == 0xfc00 {
        "a private (unique local, fc00::/7) address"
    } else if first & 0xffc0 == 0xfe80 {
        "a link-local address"
    } else if first & 0xffc0 == 0xfec0 {
        "a site-local address"
    } else if first & 0xff00 == 0xff00 {
        "a multicast address"
    } else if first == 0x2001 && ip.segments()[1] == 0x0db8 || first & 0xfff0 == 0x3ff0 {
        "a documentation address"
    } else if ip.segments()[..4] == [0x0100, 0, 0, 0] {
        "a discard-only (100::/64) address"
    } else if first == 0x2001 && ip.segments()[1] < 0x0200 {
        "an IETF protocol (2001::/23) address"
    } else {
        return None;
    })
}

/// The IPv4 address an IPv6 one stands for, if it carries one: IPv4-mapped (`::ffff:a.b.c.d`),
/// IPv4-compatible (`::a.b.c.d`, which `::1` is not), NAT64 (`64:ff9b::a.b.c.d`) or 6to4
/// (`2002:AABB:CCDD::`).
fn embedded_v4(ip: Ipv6Addr) -> Option<Ipv4Addr> {
    let s = ip.segments();
    let last = |hi: u16, lo: u16| Ipv4Addr::from((u32::from(hi) << 16) | u32::from(lo));
    if let Some(v4) = ip.to_ipv4_mapped() {
        return Some(v4);
    }
    if s[..6] == [0; 6] && !ip.is_loopback() && !ip.is_unspecified() {
        return Some(last(s[6], s[7]));
    }
    if s[..6] == [0x64, 0xff9b, 0, 0, 0, 0] {
        return Some(last(s[6], s[7]));
    }
    if s[0] == 0x2002 {
        return Some(last(s[1], s[2]));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every address of this machine's interfaces is refused, whatever its range (on the
    /// machines this is developed on, eth0 holds 192.0.2.2, which only the documentation range
    /// would catch otherwise), the IPv4 ones also as IPv4-mapped IPv6.
    #[test]
    fn every_address_of_this_machine_is_refused() {
        let locals = local_addresses();
        assert!(!locals.is_empty(), "no interface address was read");
        for ip in locals.iter() {
            assert!(forbidden(*ip).is_some(), "{ip} is this machine's own");
            if let IpAddr::V4(v4) = ip {
                assert!(
                    forbidden(IpAddr::V6(v4.to_ipv6_mapped())).is_some(),
                    "{ip} mapped"
                );
            }
        }
    }

    #[test]
    fn address_table() {
        let cases: &[(&str, Option<&str>)] = &[
            ("8.8.8.8", None),
            ("1.1.1.1", None),
            ("100.63.255.255", None),
            ("100.128.0.0", None),
            ("172.32.0.1", None),
            ("2606:4700::1111", None),
            ("0.0.0.0", Some("unspecified")),
            ("0.1.2.3", Some("unspecified")),
            ("127.0.0.1", Some("loopback")),
            ("127.255.0.9", Some("loopback")),
            ("10.0.0.1", Some("private")),
            ("172.16.0.1", Some("private")),
            ("172.31.255.255", Some("private")),
            ("192.168.0.1", Some("private")),
            ("169.254.169.254", Some("metadata")),
            ("169.254.1.1", Some("link-local")),
            ("100.64.0.1", Some("carrier-grade NAT")),
            ("100.127.255.255", Some("carrier-grade NAT")),
            ("192.0.0.170", Some("IETF")),
            ("224.0.0.1", Some("multicast")),
            ("239.255.255.250", Some("multicast")),
            ("255.255.255.255", Some("broadcast")),
            ("240.0.0.1", Some("reserved")),
            ("::", Some("unspecified")),
            ("::1", Some("loopback")),
            ("fc00::1", Some("unique local")),
            ("fd00:ec2::254", Some("unique local")),
            ("fe80::1", Some("link-local")),
            ("febf::1", Some("link-local")),
            ("fec0::1", Some("site-local")),
            ("ff02::1", Some("multicast")),
            ("::ffff:127.0.0.1", Some("loopback")),
            ("::ffff:169.254.169.254", Some("metadata")),
            ("::ffff:10.0.0.1", Some("private")),
            ("::ffff:8.8.8.8", None),
            ("::127.0.0.1", Some("loopback")),
            ("64:ff9b::a9fe:a9fe", Some("metadata")),
            ("64:ff9b::808:808", None),
            ("2002:7f00:1::", Some("loopback")),
            ("2002:c0a8:101::1", Some("private")),
            ("2002:808:808::1", None),
            ("192.0.2.2", Some("documentation")),
            ("198.51.100.7", Some("documentation")),
            ("203.0.113.1", Some("documentation")),
            ("198.18.0.1", Some("benchmarking")),
            ("198.19.255.255", Some("benchmarking")),
            ("198.20.0.1", None),
            ("192.88.99.1", Some("6to4 relay")),
            ("2001:db8::1", Some("documentation")),
            ("3fff::1", Some("documentation")),
            ("100::1", Some("discard")),
            ("2001::1", Some("IETF")),
            ("2001:4860:4860::8888", None),
            ("::ffff:198.18.0.1", Some("benchmarking")),
        ];
        for (ip, want) in cases {
            let got = forbidden(ip.parse().unwrap());
            match (got, want) {
                (None, None) => {}
                (Some(why), Some(part)) if why.contains(part) => {}
                _ => panic!("{ip}: got {got:?}, wanted {want:?}"),
            }
        }
    }

    fn list(entries: &[&str]) -> HostList {
        HostList::new(&entries.iter().map(|e| (*e).to_owned()).collect::<Vec<_>>())
    }

    #[test]
    fn listing_matches_host_and_port() {
        let l = list(&[
            "127.0.0.1:8080",
            "LocalHost",
            "[::1]:9000",
            "fd00::5",
            "git.internal.:22",
            "not a:port",
        ]);
        let cases: &[(&str, u16, bool)] = &[
            ("127.0.0.1", 8080, true),
            ("127.0.0.1", 8081, false),
            ("localhost", 1, true),
            ("LOCALHOST.", 443, true),
            ("::1", 9000, true),
            ("[::1]", 9000, true),
            ("::1", 9001, false),
            ("fd00::5", 7, true),
            ("git.internal", 22, true),
            ("git.internal", 23, false),
            ("example.com", 80, false),
        ];
        for (host, port, want) in cases {
            assert_eq!(l.names(host, *port), *want, "{host}:{port}");
        }
    }

    #[test]
    fn hosts_are_checked_by_literal_address_and_name_before_resolution() {
        let empty = list(&[]);
        let cases: &[(&str, u16, bool)] = &[
            ("example.com", 443, true),
            ("93.184.215.14", 80, true),
            ("127.0.0.1", 80, false),
            ("[::1]", 80, false),
            ("::ffff:169.254.169.254", 80, false),
            ("169.254.169.254", 80, false),
            ("metadata.google.internal", 80, false),
            ("Metadata.Google.Internal.", 80, false),
            ("10.1.2.3", 22, false),
        ];
        for (host, port, want) in cases {
            assert_eq!(
                check_host(&empty, host, *port).is_ok(),
                *want,
                "{host}:{port}"
            );
        }
        let listed = list(&["169.254.169.254", "127.0.0.1:8080", "metadata"]);
        assert!(check_host(&listed, "169.254.169.254", 80).is_ok());
        assert!(check_host(&listed, "127.0.0.1", 8080).is_ok());
        assert!(check_host(&listed, "::ffff:127.0.0.1", 8080).is_ok());
        assert!(check_host(&listed, "127.0.0.1", 8081).is_err());
        assert!(check_host(&listed, "metadata", 80).is_ok());
    }

    #[test]
    fn resolved_addresses_are_filtered_unless_listed() {
        let addr = |s: &str| s.parse::<SocketAddr>().unwrap();
        let mixed = [addr("10.0.0.7:443"), addr("93.184.215.14:443")];
        let empty = list(&[]);
        assert_eq!(
            permitted(&empty, "mixed.example", 443, &mixed).unwrap(),
            [addr("93.184.215.14:443")],
            "only the public address is connected to"
        );
        let err = permitted(&empty, "rebind.example", 80, &[addr("127.0.0.1:80")]).unwrap_err();
        assert!(err.contains("loopback"), "{err}");
        assert!(err.contains("network_hosts"), "{err}");
        assert!(
            permitted(&empty, "none.example", 80, &[])
                .unwrap_err()
                .contains("no address")
        );
        // The name is listed: every address it resolves to is allowed.
        let named = list(&["db.internal:5432"]);
        assert_eq!(
            permitted(&named, "db.internal", 5432, &[addr("10.0.0.7:5432")]).unwrap(),
            [addr("10.0.0.7:5432")]
        );
        assert!(permitted(&named, "db.internal", 5433, &[addr("10.0.0.7:5433")]).is_err());
        // The address is listed: a name resolving to it reaches what the person allowed.
        let by_address = list(&["127.0.0.1:8080"]);
        assert_eq!(
            permitted(&by_address, "localhost", 8080, &[addr("127.0.0.1:8080")]).unwrap(),
            [addr("127.0.0.1:8080")]
        );
        assert!(permitted(&by_address, "localhost", 8081, &[addr("127.0.0.1:8081")]).is_err());
    }
}
