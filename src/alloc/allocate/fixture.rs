//! Inputs for the stages' tests and alloc's own: inventories of Linux hosts in
//! 198.19.0.0/16 (/24 blocks), state files and node records.

use std::path::Path;

use ipnet::Ipv4Net;

use crate::alloc::{NodeRecord, Observed};
use crate::inventory::{Inventory, Os};
use crate::state::{Known, State};

/// An inventory of `(name, address, pin)`.
pub(in crate::alloc) fn inv(hosts: &[(&str, &str, Option<&str>)]) -> Inventory {
    let mut s = String::from(
        "cluster:\n  name: t\n  cluster_cidr: 198.19.0.0/16\n  service_cidr: 198.18.240.0/20\n  api_server: https://198.18.1.2:6443\nhosts:\n",
    );
    for (n, a, pin) in hosts {
        s += &format!("  - name: {n}\n    os: linux\n    address: {a}\n");
        if let Some(p) = pin {
            s += &format!("    pod_cidr: {p}\n");
        }
    }
    Inventory::parse(Path::new("i.yaml"), &s).unwrap()
}

pub(in crate::alloc) fn net(s: &str) -> Ipv4Net {
    s.parse().unwrap()
}

/// A state file of cluster `t` (id `0123456789abcdef`) giving `(name,
/// block, address)`.
pub(super) fn state(hosts: &[(&str, &str, &str)]) -> State {
    let mut s = State {
        cluster: "t".into(),
        cluster_id: Some(ID.into()),
        ..State::default()
    };
    for (n, c, a) in hosts {
        s.pod_cidrs.insert(n.to_string(), net(c));
        s.hosts.insert(
            n.to_string(),
            Known {
                os: Os::Linux,
                address: a.parse().unwrap(),
                node_name: None,
                cert_sha256: None,
            },
        );
    }
    s
}

pub(super) const ID: &str = "0123456789abcdef";

/// Records of cluster `t` (id [`ID`]): `(host, block or "")`.
pub(super) fn records(list: &[(&str, &str)]) -> Observed {
    Some(
        list.iter()
            .map(|(h, c)| {
                (
                    h.to_string(),
                    NodeRecord {
                        pod_cidr: (!c.is_empty()).then(|| net(c)),
                        cluster: Some(("t".into(), ID.into())),
                        ..NodeRecord::default()
                    },
                )
            })
            .collect(),
    )
}
