//! Hosts derived from the inventory: where one is reached, and a host
//! removed from it.

use std::net::Ipv4Addr;

use super::{Host, Inventory, LinuxSettings, Os, Pos, Role, WindowsSettings};

impl Host {
    /// Where kwinctl connects to the host: `connect`, else `address`.
    pub fn reach(&self) -> Ipv4Addr {
        self.connect.unwrap_or(self.address)
    }

    /// The Kubernetes node name the host registers as: `node_name` (given,
    /// or kept from the state file), else its name in lower case, as the
    /// kubelet lower-cases a host name (docs/windows.md, Node names).
    pub fn node_name(&self) -> String {
        self.node_name
            .clone()
            .unwrap_or_else(|| self.name.to_ascii_lowercase())
    }
}

/// Whether `s` can be a Node's name: a lower-case RFC 1123 DNS subdomain
/// (at most 253 characters; labels of letters, digits and '-' that start
/// and end with a letter or digit), as the API server validates a Node's
/// metadata.name (docs/research/kubernetes.md#node-name).
pub fn valid_node_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 253
        && s.split('.').all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
}

impl Inventory {
    /// A host removed from the inventory, reached with the defaults (for
    /// `reset`), or `None` when the defaults cannot reach an `os` host.
    pub fn removed_host(&self, name: &str, os: Os, address: Ipv4Addr) -> Option<Host> {
        Some(Host {
            name: name.to_string(),
            os,
            role: Role::Worker,
            address,
            connect: None,
            node_name: None,
            pod_cidr: None,
            connection: self.default_connections.get(&os)?.clone(),
            windows: WindowsSettings::default(),
            groups: Vec::new(),
            // (reset writes no boot.sh: how long it waits does not matter)
            linux: LinuxSettings::default(),
            pos: Pos::default(),
        })
    }
}
