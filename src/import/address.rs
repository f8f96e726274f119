//! A host's address from Ansible's variables: `ansible_host` (or its
//! aliases), else the host's name; an IPv4 address as written, or with
//! `--resolve` the one address the name resolves to on this machine.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use super::vars::{Problems, at, text};
use super::{AHost, Layer, Val, Var};
use crate::inventory::Pos;

/// The host's address: `ansible_host`, else its name; an IPv4 address, or
/// (with `--resolve`) the one address its name resolves to here.
pub(super) fn address(
    h: &AHost,
    vars: &BTreeMap<String, (Var, Layer)>,
    resolve: bool,
    p: &mut Problems,
) -> Option<(Ipv4Addr, String)> {
    // one of them at most: the others were dropped as Ansible ignores them
    let var = [
        "ansible_host",
        "ansible_ssh_host",
        "ansible_winrm_host",
        "ansible_psrp_host",
    ]
    .iter()
    .find_map(|k| vars.get(*k))
    .map(|(v, _)| v);
    let (name, why, pos) = match var {
        Some(v) => (text(v, p)?.to_string(), at(v), v.pos),
        None => (
            h.name.clone(),
            "the host's name".to_string(),
            Pos {
                line: h.lines.first().copied().unwrap_or(0),
                column: 1,
            },
        ),
    };
    if let Ok(a) = name.parse::<Ipv4Addr>() {
        return Some((a, why));
    }
    let refuse = |p: &mut Problems, msg: String| {
        let v = match var {
            Some(v) => v.clone(),
            None => Var {
                key: format!("host {}", h.name),
                value: Val::Null,
                pos,
                what: "no ansible_host".into(),
                file: 0,
            },
        };
        p.refuse(
            &v,
            msg,
            "give the host's IPv4 address as ansible_host, or import with --resolve to look the name up once now",
        );
    };
    if !resolve {
        refuse(
            p,
            format!(
                "{name:?} is a name: a kwinctl address is the IPv4 address every other node routes \
                 this node's pod CIDR through, so it is written as an address"
            ),
        );
        return None;
    }
    use std::net::ToSocketAddrs;
    let found: Vec<Ipv4Addr> = match (name.as_str(), 0).to_socket_addrs() {
        Ok(a) => a
            .filter_map(|s| match s.ip() {
                std::net::IpAddr::V4(v4) => Some(v4),
                _ => None,
            })
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect(),
        Err(e) => {
            refuse(p, format!("{name:?} does not resolve here: {e}"));
            return None;
        }
    };
    match found.as_slice() {
        [one] => Some((*one, format!("{why}: {name} resolved here at import"))),
        [] => {
            refuse(p, format!("{name:?} has no IPv4 address here"));
            None
        }
        many => {
            let list: Vec<String> = many.iter().map(|a| a.to_string()).collect();
            refuse(
                p,
                format!(
                    "{name:?} resolves to {} IPv4 addresses here ({}): which one the nodes route through is not for kwinctl to guess",
                    many.len(),
                    list.join(", ")
                ),
            );
            None
        }
    }
}
