//! Hosts derived from the inventory: where one is reached, and a host
//! removed from it.

use std::net::Ipv4Addr;

use super::{Host, Inventory, LinuxSettings, Os, Pos, Role, WindowsSettings};

impl Host {
    /// Where kwinctl connects to the host: `connect`, else `address`.
    pub fn reach(&self) -> Ipv4Addr {
        self.connect.unwrap_or(self.address)
    }
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
