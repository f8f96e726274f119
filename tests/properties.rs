//! Properties of the inventory loader and the CIDR allocator: no panic on any
//! input; allocations never overlap and never leave the cluster CIDR; a host
//! keeps its block across reorders. The Linux facts parser never panics on
//! what a host prints.

use std::path::Path;

use kwinctl::alloc::allocate;
use kwinctl::inventory::Inventory;
use kwinctl::os::linux::LinuxFacts;
use kwinctl::state::State;
use proptest::prelude::*;

fn inventory(prefix: u8, node_prefix: u8, hosts: &[(u8, Option<u16>)]) -> String {
    let mut s = format!(
        "cluster:\n  name: p\n  cluster_cidr: 198.19.0.0/{prefix}\n  node_prefix: {node_prefix}\n  service_cidr: 198.18.240.0/20\n  api_server: https://198.18.1.1:6443\nhosts:\n"
    );
    for (i, (addr, pin)) in hosts.iter().enumerate() {
        s += &format!("  - name: n{i}\n    os: linux\n    address: 198.18.1.{addr}\n");
        if let Some(p) = pin {
            // a /24 pin somewhere in 198.19.0.0/16 (may be invalid for the prefix)
            s += &format!("    pod_cidr: 198.19.{}.0/24\n", p % 256);
        }
    }
    s
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn linux_facts_parser_never_panics(
        lines in proptest::collection::vec(
            prop_oneof![
                Just("KWF probe linux 2".to_string()),
                Just("KWF end".to_string()),
                "KWF (hostname|ip_forward|pod_cidr|boot_sha|systemd|unit_sha|unit_enabled|unit_state|unit_journal|routes|reach|node|nodes) \\PC{0,60}",
                "KWF routes \\[\\{\"dst\":\"\\PC{0,20}\"(,\"gateway\":\"\\PC{0,16}\")?(,\"protocol\":\\PC{0,8})?\\}\\]",
                "\\PC{0,60}",
            ],
            0..16,
        )
    ) {
        let _ = LinuxFacts::parse(&lines.join("\n"), "");
    }

    #[test]
    fn loader_never_panics_on_text(s in "\\PC{0,400}") {
        let _ = Inventory::parse(Path::new("x.yaml"), &s);
    }

    #[test]
    fn loader_never_panics_on_mutated_inventories(
        cut in 0usize..400, junk in "[ :\\-\\[\\]{}a-z0-9./\\n]{0,20}",
    ) {
        let base = inventory(16, 24, &[(2, None), (3, Some(5)), (4, None)]);
        let cut = cut.min(base.len());
        let s = format!("{}{}{}", &base[..cut], junk, &base[cut..]);
        let _ = Inventory::parse(Path::new("x.yaml"), &s);
    }

    #[test]
    fn allocation_is_disjoint_inside_and_stable(
        prefix in 16u8..=23,
        hosts in proptest::collection::vec((2u8..250, proptest::option::of(0u16..256)), 1..40),
        seed in any::<u64>(),
    ) {
        // unique addresses
        let mut seen = std::collections::HashSet::new();
        let hosts: Vec<_> = hosts.into_iter().filter(|(a, _)| seen.insert(*a)).collect();
        let text = inventory(prefix, 24, &hosts);
        let Ok(inv) = Inventory::parse(Path::new("x.yaml"), &text) else { return Ok(()); };
        let Ok(a) = allocate(&inv, &State::default()) else { return Ok(()); };
        let cc = inv.cluster.cluster_cidr;
        for (i, x) in a.assignments.iter().enumerate() {
            prop_assert!(cc.contains(&x.pod_cidr), "{} outside {cc}", x.pod_cidr);
            prop_assert_eq!(x.pod_cidr.prefix_len(), 24);
            for y in &a.assignments[i + 1..] {
                prop_assert!(!x.pod_cidr.contains(&y.pod_cidr.network())
                    && !y.pod_cidr.contains(&x.pod_cidr.network()), "{} overlaps {}", x.pod_cidr, y.pod_cidr);
            }
        }
        // reorder the hosts: with the recorded state, everyone keeps its block
        let mut shuffled = hosts.clone();
        let n = shuffled.len();
        for i in 0..n {
            let j = ((seed >> (i % 60)) as usize + i * 7) % n;
            shuffled.swap(i, j);
        }
        let mut text2 = String::new();
        // keep names attached to their entries: rebuild with the original indices
        text2 += &text[..text.find("hosts:\n").unwrap() + 7];
        for (addr, pin) in &shuffled {
            let i = hosts.iter().position(|h| h.0 == *addr).unwrap();
            text2 += &format!("  - name: n{i}\n    os: linux\n    address: 198.18.1.{addr}\n");
            if let Some(p) = pin {
                text2 += &format!("    pod_cidr: 198.19.{}.0/24\n", p % 256);
            }
        }
        let inv2 = Inventory::parse(Path::new("x.yaml"), &text2).unwrap();
        let b = allocate(&inv2, &a.state).unwrap();
        for x in &b.assignments {
            prop_assert_eq!(Some(&x.pod_cidr), a.state.pod_cidrs.get(&x.host));
        }
    }
}
