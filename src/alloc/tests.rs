use super::*;
use crate::alloc::allocate::fixture::{inv, net};

fn cidrs(a: &Allocation) -> Vec<String> {
    a.assignments
        .iter()
        .map(|x| x.pod_cidr.to_string())
        .collect()
}

/// What nodes record: (host, pod CIDR).
fn records(list: &[(&str, &str)], id: &str) -> Observed {
    Some(
        list.iter()
            .map(|(h, c)| {
                (
                    h.to_string(),
                    NodeRecord {
                        pod_cidr: (!c.is_empty()).then(|| net(c)),
                        cluster: Some(("t".into(), id.into())),
                        routes: vec![],
                        generation: 0,
                        registry: Vec::new(),
                        lock_host: None,
                    },
                )
            })
            .collect(),
    )
}

const HOSTS: [(&str, &str, Option<&str>); 3] = [
    ("a", "198.18.1.2", None),
    ("b", "198.18.1.3", None),
    ("c", "198.18.1.4", None),
];

#[test]
fn fresh_allocation_in_order_and_pins_win() {
    let i = inv(&[
        ("a", "198.18.1.2", None),
        ("b", "198.18.1.3", Some("198.19.0.0/24")),
        ("c", "198.18.1.4", None),
    ]);
    let a = allocate(&i, &State::default(), &None).unwrap();
    assert_eq!(
        cidrs(&a),
        ["198.19.1.0/24", "198.19.0.0/24", "198.19.2.0/24"]
    );
    assert_eq!(a.assignments[0].gateway.to_string(), "198.19.1.1");
    assert_eq!(a.state.cluster_id.as_deref(), Some("new"), "offline");
    let mut seen = records(&[("a", ""), ("b", ""), ("c", "")], "unused");
    seen.as_mut()
        .unwrap()
        .values_mut()
        .for_each(|r| r.cluster = None);
    let a = allocate(&i, &State::default(), &seen).unwrap();
    assert!(
        a.state
            .cluster_id
            .as_ref()
            .is_some_and(|id| id.len() == 16 && id != "new")
    );
}

#[test]
fn stable_under_reorder_add_remove() {
    let a1 = allocate(&inv(&HOSTS), &State::default(), &None).unwrap();
    // reorder, remove b, add d
    let i2 = inv(&[
        ("d", "198.18.1.5", None),
        ("c", "198.18.1.4", None),
        ("a", "198.18.1.2", None),
    ]);
    let a2 = allocate(&i2, &a1.state, &None).unwrap();
    // d does not get b's block: b was removed, and may still hold it
    assert_eq!(
        cidrs(&a2),
        ["198.19.3.0/24", "198.19.2.0/24", "198.19.0.0/24"]
    );
    assert_eq!(a2.assignments[0].source, Source::New);
    assert_eq!(a2.assignments[1].source, Source::State);
    assert!(!a2.state.pod_cidrs.contains_key("b"));
    let b = &a2.state.removed["b"];
    assert_eq!(b.pod_cidr, net("198.19.1.0/24"));
    assert_eq!(b.address, Some("198.18.1.3".parse().unwrap()));
    assert!(
        a2.notes
            .iter()
            .any(|n| n.contains("kwinctl reset --limit b"))
    );
    // the removal is remembered from run to run, and ends when b is back
    let a3 = allocate(&i2, &a2.state, &None).unwrap();
    assert!(a3.state.removed.contains_key("b"));
    let a4 = allocate(&inv(&HOSTS), &a3.state, &None).unwrap();
    let removed: Vec<&String> = a4.state.removed.keys().collect();
    assert_eq!(removed, ["d"], "b is back; d has left");
    assert_eq!(a4.assignments[1].pod_cidr, net("198.19.1.0/24"));
}

#[test]
fn a_pin_taking_a_state_block_moves_the_other_host() {
    let i1 = inv(&[("a", "198.18.1.2", None), ("b", "198.18.1.3", None)]);
    let a1 = allocate(&i1, &State::default(), &None).unwrap();
    let i2 = inv(&[
        ("a", "198.18.1.2", None),
        ("b", "198.18.1.3", Some("198.19.0.0/24")),
    ]);
    let a2 = allocate(&i2, &a1.state, &None).unwrap();
    // a moves; and not to b's old block, which b's node may still record
    assert_eq!(cidrs(&a2), ["198.19.2.0/24", "198.19.0.0/24"]);
    assert!(
        a2.notes.iter().any(|n| n.contains("held by b")),
        "{:?}",
        a2.notes
    );
}

#[test]
fn the_nodes_records_beat_a_lost_state_and_a_new_order() {
    let a1 = allocate(&inv(&HOSTS), &State::default(), &None).unwrap();
    let id = a1.state.cluster_id.clone().unwrap();
    // the state is lost and the inventory reordered: c first
    let i2 = inv(&[HOSTS[2], HOSTS[0], HOSTS[1]]);
    let seen = records(
        &[
            ("a", "198.19.0.0/24"),
            ("b", "198.19.1.0/24"),
            ("c", "198.19.2.0/24"),
        ],
        &id,
    );
    let a2 = allocate(&i2, &State::default(), &seen).unwrap();
    assert!(a2.disputes.is_empty(), "{:?}", a2.disputes);
    assert_eq!(
        cidrs(&a2),
        ["198.19.2.0/24", "198.19.0.0/24", "198.19.1.0/24"]
    );
    assert!(a2.assignments.iter().all(|x| x.source == Source::Node));
    assert_eq!(a2.state.cluster_id.as_deref(), Some(id.as_str()));
    assert!(
        a2.notes.iter().any(|n| n.contains("adopted")),
        "{:?}",
        a2.notes
    );
    let nodes = nodes(&i2, &a2);
    assert_eq!(
        nodes[1].routes()[&net("198.19.2.0/24")].to_string(),
        "198.18.1.4"
    );
}

#[test]
fn two_nodes_recording_one_block_are_both_disputed_and_frozen() {
    let seen = records(
        &[
            ("a", "198.19.0.0/24"),
            ("b", "198.19.0.0/24"),
            ("c", "198.19.2.0/24"),
        ],
        "x",
    );
    let state = State {
        cluster_id: Some("x".into()),
        ..State::new("t")
    };
    let a = allocate(&inv(&HOSTS), &state, &seen).unwrap();
    let disputed: Vec<&str> = a.disputes.iter().map(|d| d.host.as_str()).collect();
    assert_eq!(disputed, ["a", "b"]);
    assert!(a.disputes[0].reason.contains("a and b claim 198.19.0.0/24"));
    assert_eq!(cidrs(&a), ["198.19.2.0/24"]);
    // c's routes to the disputed block and via a's and b's addresses are frozen
    assert!(a.frozen.route(&net("198.19.0.0/24"), None).is_some());
    assert!(
        a.frozen
            .route(&net("198.19.9.0/24"), Some("198.18.1.3".parse().unwrap()))
            .is_some()
    );
    assert!(a.frozen.route(&net("198.19.2.0/24"), None).is_none());
}

#[test]
fn unsound_records_pins_and_other_clusters_are_disputes() {
    let state = State {
        cluster_id: Some("x".into()),
        ..State::new("t")
    };
    let i = inv(&[
        ("a", "198.18.1.2", None),
        ("b", "198.18.1.3", Some("198.19.5.0/24")),
        ("c", "198.18.1.4", Some("198.19.6.0/24")),
        ("d", "198.18.1.5", None),
    ]);
    let mut seen = records(
        &[
            ("a", "198.19.2.1/24"), // host bits
            ("b", "198.19.4.0/24"), // not its pin
            ("c", "198.19.6.0/24"), // its pin: fine
            ("d", "198.19.7.0/24"),
        ],
        "x",
    );
    seen.as_mut().unwrap().get_mut("d").unwrap().cluster = Some(("t".into(), "other".into()));
    let a = allocate(&i, &state, &seen).unwrap();
    let why = |h: &str| a.dispute(h).map(|d| d.reason.clone()).unwrap_or_default();
    assert!(why("a").contains("not a /24 block"), "{}", why("a"));
    assert!(
        why("b").contains("the inventory pins 198.19.5.0/24"),
        "{}",
        why("b")
    );
    assert!(why("d").contains("belongs to cluster"), "{}", why("d"));
    assert_eq!(a.assignment("c").unwrap().source, Source::Pinned);
}

#[test]
fn nodes_disagreeing_about_the_cluster_id_stop_everything() {
    let mut seen = records(&[("a", "198.19.0.0/24"), ("b", "198.19.1.0/24")], "x");
    seen.as_mut().unwrap().get_mut("b").unwrap().cluster = Some(("t".into(), "y".into()));
    let e = allocate(&inv(&HOSTS), &State::default(), &seen).unwrap_err();
    assert!(e.0.contains("x on a") && e.0.contains("y on b"), "{e}");
}

#[test]
fn a_block_routed_to_an_unknown_node_is_never_handed_out() {
    // another operator's node 198.18.1.9 holds 198.19.1.0/24: a records the
    // route kwinctl made to it
    let mut seen = records(&[("a", "198.19.0.0/24"), ("b", ""), ("c", "")], "x");
    seen.as_mut().unwrap().get_mut("a").unwrap().routes =
        vec![(net("198.19.1.0/24"), Some("198.18.1.9".parse().unwrap()))];
    let state = State {
        cluster_id: Some("x".into()),
        ..State::new("t")
    };
    let a = allocate(&inv(&HOSTS), &state, &seen).unwrap();
    assert_eq!(
        cidrs(&a),
        ["198.19.0.0/24", "198.19.2.0/24", "198.19.3.0/24"]
    );
    assert!(
        a.frozen
            .route(&net("198.19.1.0/24"), Some("198.18.1.9".parse().unwrap()))
            .is_some()
    );
}

#[test]
fn no_new_block_while_a_node_s_block_is_unknown() {
    // b did not answer and the state file does not know it; c is new
    let seen = records(&[("a", "198.19.0.0/24"), ("c", "")], "x");
    let state = State {
        cluster_id: Some("x".into()),
        ..State::new("t")
    };
    let a = allocate(&inv(&HOSTS), &state, &seen).unwrap();
    assert!(
        a.dispute("c")
            .unwrap()
            .reason
            .contains("blocks of b are unknown")
    );
    assert!(a.dispute("b").is_some());
    assert_eq!(cidrs(&a), ["198.19.0.0/24"]);
    // with b's block in the state file, c gets one
    let state = State {
        pod_cidrs: [("b".to_string(), net("198.19.1.0/24"))].into(),
        ..state
    };
    let a = allocate(&inv(&HOSTS), &state, &seen).unwrap();
    assert_eq!(
        cidrs(&a),
        ["198.19.0.0/24", "198.19.1.0/24", "198.19.2.0/24"]
    );
    assert_eq!(a.assignment("b").unwrap().source, Source::State);
}

#[test]
fn peers_and_routes() {
    let i = inv(&HOSTS);
    let a = allocate(&i, &State::default(), &None).unwrap();
    let nodes = nodes(&i, &a);
    let r = nodes[0].routes();
    assert_eq!(r.len(), 2);
    assert_eq!(r[&net("198.19.1.0/24")].to_string(), "198.18.1.3");
    assert_eq!(nodes[2].peers().count(), 2);
}

#[test]
fn a_node_at_a_new_address_keeps_its_block_and_its_peers_routes_move() {
    // b was at 198.18.1.3 (the state file says so); it is now at .50
    let a1 = allocate(&inv(&HOSTS), &State::default(), &None).unwrap();
    let mut state = a1.state.clone();
    state.cluster_id = Some("x".into());
    let moved = inv(&[
        ("a", "198.18.1.2", None),
        ("b", "198.18.1.50", None),
        ("c", "198.18.1.4", None),
    ]);
    let mut seen = records(
        &[
            ("a", "198.19.0.0/24"),
            ("b", "198.19.1.0/24"),
            ("c", "198.19.2.0/24"),
        ],
        "x",
    );
    let old: Ipv4Addr = "198.18.1.3".parse().unwrap();
    for h in ["a", "c"] {
        seen.as_mut().unwrap().get_mut(h).unwrap().routes = vec![(net("198.19.1.0/24"), Some(old))];
    }
    let a = allocate(&moved, &state, &seen).unwrap();
    assert!(a.disputes.is_empty(), "{:?}", a.disputes);
    assert_eq!(
        cidrs(&a),
        ["198.19.0.0/24", "198.19.1.0/24", "198.19.2.0/24"]
    );
    assert!(a.frozen.route(&net("198.19.1.0/24"), Some(old)).is_none());
    assert!(
        a.notes
            .iter()
            .any(|n| n.starts_with("b moved from 198.18.1.3 to 198.18.1.50")),
        "{:?}",
        a.notes
    );
    // the peers' desired route is via the new address
    let nodes = nodes(&moved, &a);
    assert_eq!(
        nodes[0].routes()[&net("198.19.1.0/24")].to_string(),
        "198.18.1.50"
    );
    assert_eq!(a.state.hosts["b"].address.to_string(), "198.18.1.50");
    // a route via an old address to a block the host does not hold stays
    // another operator's
    seen.as_mut().unwrap().get_mut("a").unwrap().routes = vec![(net("198.19.7.0/24"), Some(old))];
    let a = allocate(&moved, &state, &seen).unwrap();
    assert!(a.frozen.route(&net("198.19.7.0/24"), Some(old)).is_some());
    // two nodes claiming one block stay a dispute
    let mut twice = seen.clone();
    twice.as_mut().unwrap().get_mut("c").unwrap().pod_cidr = Some(net("198.19.1.0/24"));
    let a = allocate(&moved, &state, &twice).unwrap();
    assert_eq!(a.disputes.len(), 2, "{:?}", a.disputes);
}

#[test]
fn a_state_file_of_another_cluster_of_one_name_is_named_not_the_nodes() {
    let seen = records(
        &[
            ("a", "198.19.0.0/24"),
            ("b", "198.19.1.0/24"),
            ("c", "198.19.2.0/24"),
        ],
        "nodes-id",
    );
    let state = State {
        cluster_id: Some("foreign-id".into()),
        ..State::new("t")
    };
    let e = allocate(&inv(&HOSTS), &state, &seen).err().unwrap().0;
    assert!(e.contains("the state file i.kwinctl-state.json"), "{e}");
    assert!(
        e.contains("foreign-id") && e.contains("nodes-id on a, b, c"),
        "{e}"
    );
    assert!(e.contains("move the state file aside"), "{e}");
    // a first run stopped before any node recorded its id is named too (the
    // reliability probe's L7, trial 8), not only another cluster's file
    assert!(
        e.contains("or the run that wrote it stopped before any node recorded its id"),
        "{e}"
    );
    assert!(!e.contains("reset"), "no node is to be reset: {e}");
    // without the state file the nodes' id is adopted and nothing is disputed
    let a = allocate(&inv(&HOSTS), &State::default(), &seen).unwrap();
    assert!(a.disputes.is_empty(), "{:?}", a.disputes);
    // a node of the state file's cluster among them: the others are disputed
    let mut mixed = seen.clone();
    mixed.as_mut().unwrap().get_mut("c").unwrap().cluster = Some(("t".into(), "foreign-id".into()));
    let a = allocate(&inv(&HOSTS), &state, &mixed).unwrap();
    let disputed: Vec<&str> = a.disputes.iter().map(|d| d.host.as_str()).collect();
    assert_eq!(disputed, ["a", "b"]);
}

/// The reliability probe's N4-res: on a first bring-up one silent host
/// stops every host. It still does (a silent node may record the id), and
/// the error says the ways on: make it reachable, or leave it out of the
/// inventory for the first `up` (`--limit` cannot help).
#[test]
fn a_first_bring_up_with_a_silent_host_says_how_to_go_on() {
    let i = inv(&HOSTS);
    let mut seen = records(&[("a", ""), ("b", "")], "unused");
    seen.as_mut()
        .unwrap()
        .values_mut()
        .for_each(|r| r.cluster = None);
    let e = allocate(&i, &State::default(), &seen).unwrap_err().0;
    assert!(e.contains("c did not answer"), "{e}");
    assert!(e.contains("`--limit` does not help"), "{e}");
    assert!(
        e.contains("remove them from the inventory for the first `up`"),
        "{e}"
    );
}
