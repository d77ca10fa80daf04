//! The intercept allowlist: the one source for both "which hosts are decrypted" and the local
//! CA's name constraints, so the two cannot drift.

use rcgen::{CidrSubnet, GeneralSubtree, NameConstraints};

/// Registrable domains whose traffic is decrypted, each with every subdomain.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterceptList {
    domains: Vec<String>,
}

impl InterceptList {
    /// Domains are lowercased and stripped of a leading `*.` and of a leading or trailing dot;
    /// empty entries are dropped, and so is anything outside Cursor's domains
    /// ([`crate::config::is_cursor_domain`]; config validation refuses those with a message, this
    /// is the CA's own guard).
    pub fn new<I, S>(domains: I) -> InterceptList
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        let mut out: Vec<String> = domains
            .into_iter()
            .map(|d| {
                let d = d.as_ref().trim();
                d.strip_prefix("*.").unwrap_or(d).trim_matches('.').to_ascii_lowercase()
            })
            .filter(|d| {
                let cursor = crate::config::is_cursor_domain(d);
                if !cursor && !d.is_empty() {
                    tracing::warn!(domain = %d, "not one of Cursor's domains; it is not intercepted");
                }
                cursor
            })
            .collect();
        out.sort();
        out.dedup();
        InterceptList { domains: out }
    }

    pub fn domains(&self) -> &[String] {
        &self.domains
    }

    /// Whether `host` (a DNS name, no port) is one of the domains or below one, on a label
    /// boundary: `api2.cursor.sh` matches `cursor.sh`, `evilcursor.sh` does not. IP literals and
    /// names with characters outside a DNS hostname never match.
    pub fn matches(&self, host: &str) -> bool {
        let host = host.strip_suffix('.').unwrap_or(host).to_ascii_lowercase();
        if !is_dns_name(&host) {
            return false;
        }
        self.domains.iter().any(|d| host == *d || host.strip_suffix(d.as_str()).is_some_and(|p| p.ends_with('.')))
    }

    /// The root's name constraints: a permitted DNS subtree per domain, and every IPv4 and IPv6
    /// address excluded. (Constraints apply per name type: without the exclusions, a leaf with an
    /// IP-address SAN would pass a DNS-only constraint.)
    pub fn name_constraints(&self) -> NameConstraints {
        NameConstraints {
            permitted_subtrees: self.domains.iter().map(|d| GeneralSubtree::DnsName(d.clone())).collect(),
            excluded_subtrees: vec![
                GeneralSubtree::IpAddress(CidrSubnet::V4([0; 4], [0; 4])),
                GeneralSubtree::IpAddress(CidrSubnet::V6([0; 16], [0; 16])),
            ],
        }
    }
}

/// A syntactically valid DNS hostname of letters, digits and hyphens (not an IP literal).
pub fn is_dns_name(host: &str) -> bool {
    !host.is_empty()
        && host.len() <= 253
        && host.parse::<std::net::IpAddr>().is_err()
        && host.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && !l.starts_with('-')
                && !l.ends_with('-')
                && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
        })
        && host.rsplit('.').next().is_some_and(|tld| !tld.bytes().all(|b| b.is_ascii_digit()))
}
