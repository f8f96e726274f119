//! A Windows node's Kubernetes name.
//!
//! kwinctl starts the kubelet and kube-proxy with `--hostname-override`, so
//! it decides the name: the host's `node_name:`, else its inventory name in
//! lower case (what the kubelet itself registers as without an override is
//! the machine's host name, lower-cased: docs/research/kubernetes.md#node-name).
//! The name does not follow the address, so a node that moves keeps it.
//!
//! Nodes brought up before kwinctl named them by host name registered as
//! their address. [`keep`] keeps that name for a host the state file
//! already knew without a recorded node name, and the state file records
//! every Windows node's name from then on (docs/windows.md, Node names,
//! says how to move such a node to its host name).

use crate::inventory::{Inventory, Os, valid_node_name as valid};
use crate::state::State;

/// Each Windows host without `node_name:` keeps the name the state file
/// says its node has: the recorded name, or, for a node recorded before
/// kwinctl recorded names, its recorded address (what it registered as).
/// Returns the hosts whose name was kept, with it.
pub fn keep(inv: &mut Inventory, state: &State) -> Vec<(String, String)> {
    let mut kept = Vec::new();
    for h in inv.hosts.iter_mut() {
        if h.os != Os::Windows || h.node_name.is_some() {
            continue;
        }
        let Some(known) = state.hosts.get(&h.name.to_ascii_lowercase()) else {
            continue;
        };
        if known.os != Os::Windows {
            continue;
        }
        let name = known
            .node_name
            .clone()
            .unwrap_or_else(|| known.address.to_string());
        if name != h.node_name() && valid(&name) {
            kept.push((h.name.clone(), name.clone()));
            h.node_name = Some(name);
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::Known;

    #[test]
    fn node_names_are_lower_case_dns_subdomains() {
        for ok in ["win1", "win-01.example.com", "198.18.1.5", "a"] {
            assert!(valid(ok), "{ok}");
        }
        for bad in [
            "",
            "WIN1",
            "win_1",
            "-win",
            "win-",
            "a..b",
            &"a".repeat(254),
        ] {
            assert!(!valid(bad), "{bad}");
        }
    }

    fn inventory() -> Inventory {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("inventory.yaml");
        std::fs::write(
            &p,
            "cluster: {name: c, cluster_cidr: 198.19.0.0/16, node_prefix: 24, service_cidr: 198.18.240.0/20, api_server: 'http://198.18.1.1:8080', kubernetes_version: '1.30.0'}\n\
             defaults: {winrm: {user: a, password_env: P}}\n\
             hosts:\n\
             - {name: WIN1, os: windows, address: 198.18.1.5}\n\
             - {name: win2, os: windows, address: 198.18.1.6}\n\
             - {name: win3, os: windows, address: 198.18.1.7, node_name: w3}\n\
             - {name: win4, os: windows, address: 198.18.1.8}\n",
        )
        .unwrap();
        Inventory::load(&p).unwrap()
    }

    fn known(address: &str, node_name: Option<&str>) -> Known {
        Known {
            os: Os::Windows,
            address: address.parse().unwrap(),
            node_name: node_name.map(String::from),
            cert_sha256: None,
        }
    }

    #[test]
    fn a_node_keeps_the_name_it_has_and_a_new_one_takes_its_host_name() {
        let mut inv = inventory();
        let mut state = State::default();
        // recorded before names were: it registered as its address, which
        // has moved since
        state
            .hosts
            .insert("win1".into(), known("198.18.1.50", None));
        state
            .hosts
            .insert("win2".into(), known("198.18.1.6", Some("win2")));
        state
            .hosts
            .insert("win3".into(), known("198.18.1.7", Some("old3")));
        let kept = keep(&mut inv, &state);
        assert_eq!(kept, vec![("WIN1".to_string(), "198.18.1.50".to_string())]);
        let names: Vec<String> = inv.hosts.iter().map(|h| h.node_name()).collect();
        // win3's node_name: wins over the record (the documented rename);
        // win4 is new: its host name in lower case
        assert_eq!(names, ["198.18.1.50", "win2", "w3", "win4"]);
    }
}
