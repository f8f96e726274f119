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
        let Ok(a) = allocate(&inv, &State::default(), &None) else { return Ok(()); };
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
        let b = allocate(&inv2, &a.state, &None).unwrap();
        for x in &b.assignments {
            prop_assert_eq!(Some(&x.pod_cidr), a.state.pod_cidrs.get(&x.host));
        }
    }
}

/// A model of the cluster over time, driven by the real allocator and the
/// real Linux diff: nodes (their records and kwinctl routes), and two
/// operators, each with an inventory (a subset of the nodes, in some order)
/// and a state file. Runs are atomic (the cluster lock serialises them).
mod cluster_model {
    use std::collections::BTreeMap;
    use std::net::Ipv4Addr;
    use std::path::Path;

    use ipnet::Ipv4Net;
    use kwinctl::alloc::{NodeRecord, allocate, nodes};
    use kwinctl::inventory::Inventory;
    use kwinctl::os::linux::diff::diff_linux;
    use kwinctl::os::linux::{Action, LinuxDesired, LinuxFacts, Route};
    use kwinctl::state::State;

    pub const HOSTS: usize = 6;

    #[derive(Debug, Clone)]
    pub enum Step {
        /// Operator adds a host to its inventory (at the end).
        Add(usize, usize),
        Remove(usize, usize),
        /// Operator reorders its inventory (rotate by n).
        Reorder(usize, usize),
        /// Operator loses its state file.
        LoseState(usize),
        /// Operator runs `up`; the hosts in the mask do not answer.
        Up(usize, u8),
        /// Operator resets a host (in its inventory or removed from it).
        Reset(usize, usize),
    }

    #[derive(Default, Clone)]
    pub struct Node {
        /// The cluster's registry (kept by the lock host, n0).
        pub registry: Vec<kwinctl::alloc::Registered>,
        pub pod_cidr: Option<Ipv4Net>,
        pub cluster: Option<(String, String)>,
        /// The lock host it records.
        pub lock_host: Option<String>,
        /// kwinctl's routes: destination → next hop.
        pub routes: BTreeMap<Ipv4Net, Ipv4Addr>,
    }

    pub struct Operator {
        pub hosts: Vec<usize>,
        pub state: State,
    }

    pub fn address(h: usize) -> Ipv4Addr {
        Ipv4Addr::new(198, 18, 1, 10 + h as u8)
    }

    fn inventory(hosts: &[usize]) -> Option<Inventory> {
        if hosts.is_empty() {
            return None;
        }
        let mut s = String::from(
            "cluster:\n  name: m\n  cluster_cidr: 198.19.0.0/20\n  service_cidr: 198.18.240.0/20\n  api_server: https://198.18.1.1:6443\nhosts:\n",
        );
        for h in hosts {
            s += &format!(
                "  - name: n{h}\n    os: linux\n    address: {}\n",
                address(*h)
            );
            if *h == 0 {
                s += "    role: control-plane\n";
            }
        }
        Some(Inventory::parse(Path::new("m.yaml"), &s).expect("model inventory"))
    }

    fn facts(n: &Node) -> LinuxFacts {
        LinuxFacts {
            ip_forward: true,
            recorded_pod_cidr: n.pod_cidr,
            recorded_cluster: n.cluster.clone(),
            recorded_lock_host: n.lock_host.clone(),
            routes: n
                .routes
                .iter()
                .map(|(d, v)| Route {
                    dst: *d,
                    via: Some(*v),
                    dev: Some("eth0".into()),
                    proto: "198".into(),
                })
                .collect(),
            ..LinuxFacts::fresh(false)
        }
    }

    /// `up` by one operator: probe, allocate, record the state, and — when
    /// it holds the cluster lock on the control plane n0 — write the
    /// registry there and converge every answering, undisputed node of its
    /// inventory.
    pub fn up(op: &mut Operator, nodes_now: &mut [Node], down: u8) {
        let Some(inv) = inventory(&op.hosts) else {
            return;
        };
        let answering = |h: usize| down & (1 << h) == 0;
        // the cluster lock (and registry) live on the control plane
        let lock_held = op.hosts.contains(&0) && answering(0);
        let observed: BTreeMap<String, NodeRecord> = op
            .hosts
            .iter()
            .filter(|h| answering(**h))
            .map(|h| {
                let n = &nodes_now[*h];
                (
                    format!("n{h}"),
                    NodeRecord {
                        pod_cidr: n.pod_cidr,
                        cluster: n.cluster.clone(),
                        routes: n.routes.iter().map(|(d, v)| (*d, Some(*v))).collect(),
                        generation: 0,
                        registry: n.registry.clone(),
                        lock_host: n.lock_host.clone(),
                    },
                )
            })
            .collect();
        let Ok(alloc) = allocate(&inv, &op.state, &Some(observed)) else {
            return;
        };
        op.state = alloc.state.clone();
        if !lock_held {
            // no lock: nothing changes (the run refuses)
            return;
        }
        nodes_now[0].registry = alloc.registry.clone();
        let desired = LinuxDesired {
            boot_script: String::new(),
            unit: String::new(),
        };
        for node in nodes(&inv, &alloc) {
            let h: usize = node.name[1..].parse().unwrap();
            if !answering(h) {
                continue;
            }
            let Ok(d) = diff_linux(&node, &desired, &facts(&nodes_now[h])) else {
                continue;
            };
            let n = &mut nodes_now[h];
            for a in d.actions() {
                match a {
                    Action::RecordPodCidr {
                        pod_cidr,
                        cluster,
                        cluster_id,
                        lock_host,
                    } => {
                        n.pod_cidr = Some(*pod_cidr);
                        n.cluster = Some((cluster.clone(), cluster_id.clone()));
                        n.lock_host = Some(lock_host.clone());
                    }
                    Action::AddRoute { dst, via } | Action::ReplaceRoute { dst, via, .. } => {
                        n.routes.insert(*dst, *via);
                    }
                    Action::DelRoute { dst, .. } => {
                        n.routes.remove(dst);
                    }
                    _ => {}
                }
            }
        }
    }

    /// `reset --limit h`: the node forgets everything; a removed host is
    /// forgotten by the state too (as the CLI does once reset reaches it).
    pub fn reset(op: &mut Operator, nodes_now: &mut [Node], h: usize) {
        let name = format!("n{h}");
        if !op.hosts.contains(&0) {
            return; // no cluster lock: the run refuses
        }
        if op.hosts.contains(&h) || op.state.removed.contains_key(&name) {
            let registry = std::mem::take(&mut nodes_now[h].registry);
            nodes_now[h] = Node {
                registry,
                ..Node::default()
            };
            if op.state.removed.remove(&name).is_some() {
                nodes_now[0].registry.retain(|e| e.host != name);
            }
        }
    }
    /// Runs `steps` from one shared cluster (see the property below); the
    /// first time two nodes of one cluster hold one block, what and when.
    pub fn run(steps: &[Step]) -> Result<(), String> {
        let mut nodes_now: Vec<Node> = vec![Node::default(); HOSTS];
        let mut ops: Vec<Operator> = (0..2)
            .map(|_| Operator {
                hosts: vec![0, 1],
                state: State::new("m"),
            })
            .collect();
        up(&mut ops[0], &mut nodes_now, 0);
        ops[1].state = ops[0].state.clone();
        for (i, step) in steps.iter().enumerate() {
            match step {
                Step::Add(o, h) => {
                    if !ops[*o].hosts.contains(h) {
                        ops[*o].hosts.push(*h);
                    }
                }
                Step::Remove(o, h) => ops[*o].hosts.retain(|x| x != h),
                Step::Reorder(o, n) => {
                    let len = ops[*o].hosts.len().max(1);
                    ops[*o].hosts.rotate_left(n % len);
                }
                Step::LoseState(o) => ops[*o].state = State::new("m"),
                Step::Up(o, down) => up(&mut ops[*o], &mut nodes_now, *down),
                Step::Reset(o, h) => reset(&mut ops[*o], &mut nodes_now, *h),
            }
            let held: Vec<_> = nodes_now
                .iter()
                .enumerate()
                .filter_map(|(h, n)| Some((h, n.pod_cidr?, n.cluster.clone()?)))
                .collect();
            for (j, (h1, c1, k1)) in held.iter().enumerate() {
                for (h2, c2, k2) in &held[j + 1..] {
                    if k1 == k2 && kwinctl::inventory::nets_overlap(c1, c2) {
                        return Err(format!(
                            "n{h1} and n{h2} of cluster {k1:?} both hold {c1} / {c2} after step {i} of {steps:?}"
                        ));
                    }
                }
            }
        }
        Ok(())
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    /// Two operators start from one cluster (one ran `up`, the other copied
    /// the folder). Whatever they do then, in whatever order — add, remove
    /// and reorder hosts, lose their state files, run `up` with some nodes
    /// not answering, reset — no two nodes of one cluster ever record one
    /// block. (Nodes an operator's inventory never shared with the other's
    /// can form a cluster of their own: it has its own id, and joining the
    /// two is refused.)
    #[test]
    fn no_two_nodes_ever_hold_one_block(
        steps in proptest::collection::vec(
            prop_oneof![
                (0usize..2, 0usize..cluster_model::HOSTS).prop_map(|(o, h)| cluster_model::Step::Add(o, h)),
                (0usize..2, 0usize..cluster_model::HOSTS).prop_map(|(o, h)| cluster_model::Step::Remove(o, h)),
                (0usize..2, 0usize..5).prop_map(|(o, n)| cluster_model::Step::Reorder(o, n)),
                (0usize..2).prop_map(cluster_model::Step::LoseState),
                (0usize..2, any::<u8>()).prop_map(|(o, m)| cluster_model::Step::Up(o, m & 0b101)),
                (0usize..2, 0usize..cluster_model::HOSTS).prop_map(|(o, h)| cluster_model::Step::Reset(o, h)),
            ],
            1..40,
        )
    ) {
        if let Err(e) = cluster_model::run(&steps) {
            prop_assert!(false, "{}", e);
        }
    }
}

/// Found by `no_two_nodes_ever_hold_one_block`: one operator loses its
/// state file and resets the lock host; the other then adds a host.
#[test]
fn a_reset_lock_host_and_a_lost_state_never_hand_out_a_held_block() {
    use cluster_model::Step::*;
    let steps = [
        Add(1, 3),
        Add(0, 4),
        Remove(0, 1),
        Up(1, 1),
        Up(0, 0),
        Remove(1, 3),
        Up(1, 0),
        LoseState(0),
        Up(0, 0),
        Reset(0, 0),
        Add(1, 3),
        Up(1, 0),
    ];
    if let Err(e) = cluster_model::run(&steps) {
        panic!("{e}");
    }
}
