//! Removing a node: a host deleted from the inventory is reached by
//! `kwinctl reset --limit NAME` with the trust it had (its address, and the
//! WinRM certificate pin its host entry carried, kept in the state file
//! until it is reset), and every other node drops its routes to the
//! node's block in the same run.

use ipnet::Ipv4Net;

use crate::diff::{Diff, Item};
use crate::inventory::{Connection, Host, Inventory};
use crate::state::Known;

/// How a removed host is reached: the inventory's default connection for
/// its OS, at the address it had, with the certificate pin its entry had
/// (`None`: the inventory has no default connection for that OS).
pub fn reach(inv: &Inventory, name: &str, at: &Known) -> Option<Host> {
    let mut h = inv.removed_host(name, at.os, at.address)?;
    if let (Connection::WinRm(w), Some(pin)) = (&mut h.connection, &at.cert_sha256) {
        w.cert_sha256 = Some(pin.clone());
    }
    Some(h)
}

/// What a node keeps of its diff while the removed hosts holding `gone`
/// are reset: only the removal of its routes to those blocks, and its boot
/// script (Linux) or boot task (Windows) written again without them, so
/// that they do not come back at its next boot. The boot item goes first:
/// the l2bridge boot task's loop puts back every route its task lists,
/// so a route removed before the task is replaced could be put back in
/// between (docs/windows-boot-task.md).
pub fn peer_routes<A>(d: Diff<A>, gone: &[Ipv4Net]) -> Diff<A> {
    let drops = |key: &str| {
        key.strip_prefix("stale route ")
            .and_then(|n| n.parse::<Ipv4Net>().ok())
            .is_some_and(|n| gone.iter().any(|g| crate::inventory::nets_overlap(g, &n)))
    };
    let windows_boot = format!("boot task {}", crate::os::windows::boot::BOOT_TASK);
    let boot = |key: &str| key == "boot script" || key == windows_boot;
    let any = d.items.iter().any(|i| i.action.is_some() && drops(&i.key));
    let (mut items, rest): (Vec<_>, Vec<_>) = d
        .items
        .into_iter()
        .map(|i| Item {
            action: i.action.filter(|_| drops(&i.key) || (any && boot(&i.key))),
            key: i.key,
        })
        .partition(|i| boot(&i.key));
    items.extend(rest);
    Diff {
        items,
        notes: Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    #[test]
    fn a_removed_windows_host_is_reached_with_its_pin() {
        let inv = Inventory::parse(
            Path::new("i.yaml"),
            "cluster:\n  name: t\n  cluster_cidr: 198.19.0.0/16\n  service_cidr: 198.18.240.0/20\n  \
             api_server: https://198.18.1.2:6443\ndefaults:\n  winrm: { port: 5986, tls: true }\n\
             hosts:\n  - name: cp\n    os: linux\n    role: control-plane\n    address: 198.18.1.2\n",
        )
        .unwrap();
        let at = Known {
            os: crate::inventory::Os::Windows,
            address: "198.18.1.6".parse().unwrap(),
            node_name: None,
            cert_sha256: Some("ab".repeat(32)),
        };
        let h = reach(&inv, "win2", &at).expect("a default WinRM connection");
        let Connection::WinRm(w) = &h.connection else {
            panic!("{:?}", h.connection)
        };
        assert_eq!(w.cert_sha256.as_deref(), Some("ab".repeat(32).as_str()));
        assert_eq!(h.address, at.address);
    }

    #[test]
    fn peers_keep_only_the_removal_of_routes_to_the_gone_blocks() {
        let d = Diff {
            items: vec![
                Item {
                    key: "stale route 198.19.4.0/24".to_string(),
                    action: Some(1),
                },
                Item {
                    key: "stale route 198.19.9.0/24".to_string(),
                    action: Some(2),
                },
                Item {
                    key: "route 198.19.4.0/24".to_string(),
                    action: Some(3),
                },
                Item {
                    key: "boot script".to_string(),
                    action: Some(4),
                },
            ],
            notes: vec!["n".into()],
        };
        let kept = peer_routes(d, &["198.19.4.0/24".parse().unwrap()]);
        let acts: Vec<i32> = kept.items.iter().filter_map(|i| i.action).collect();
        // the boot script first (it only runs at boot: the order is harmless)
        assert_eq!(acts, [4, 1]);
        let none = peer_routes(
            Diff {
                items: vec![Item {
                    key: "boot script".to_string(),
                    action: Some(4),
                }],
                notes: vec![],
            },
            &["198.19.4.0/24".parse().unwrap()],
        );
        assert_eq!(none.changes(), 0, "no route to drop: boot.sh is left alone");
        // Windows: the boot task is kept too, and goes before the route
        // removal (its loop would put the route back otherwise)
        let task = format!("boot task {}", crate::os::windows::boot::BOOT_TASK);
        let kept = peer_routes(
            Diff {
                items: vec![
                    Item {
                        key: "stale route 198.19.4.0/24".to_string(),
                        action: Some(1),
                    },
                    Item {
                        key: task.clone(),
                        action: Some(5),
                    },
                    Item {
                        key: "firewall".to_string(),
                        action: Some(6),
                    },
                ],
                notes: vec![],
            },
            &["198.19.4.0/24".parse().unwrap()],
        );
        let acts: Vec<(&str, i32)> = kept
            .items
            .iter()
            .filter_map(|i| i.action.map(|a| (i.key.as_str(), a)))
            .collect();
        assert_eq!(acts, [(task.as_str(), 5), ("stale route 198.19.4.0/24", 1)]);
    }
}
