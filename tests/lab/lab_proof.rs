//! A block moves only with proof, and the node at fault is the one that
//! fails (issue 38, items 1 and 2, built from the reliability probe's
//! reproductions), on real lab hosts. A "compromised" node is one whose
//! record or routes the test writes directly on it.
//! - a mistyped address naming another SSH host that records nothing is no
//!   move: refused before anything changes, `plan` saying what it saw;
//! - a node recording the block of a node that does not answer is the one
//!   disputed, and no peer's route to that block moves;
//! - a node carrying a fake route to another node's block fails, and the
//!   victim's lost routes are restored.

use crate::common;

use common::lab::{Lab, require_root};
use common::{kwinctl, summary, text, write};

/// The inventory with only these hosts (in the lab's order).
fn only(lab: &Lab, names: &[&str]) -> String {
    let inv = std::fs::read_to_string(lab.inventory()).unwrap();
    let (head, hosts) = inv.split_once("hosts:\n").expect("hosts:");
    let mut out = format!("{head}hosts:\n");
    for b in hosts.split("  - name: ").filter(|b| !b.is_empty()) {
        let name = b.lines().next().unwrap().trim();
        if names.contains(&name) {
            out += &format!("  - name: {b}");
        }
    }
    out
}

/// `text` with host `name`'s `address:` set to `addr`.
fn with_address(text: &str, name: &str, addr: &str) -> String {
    let mut out = String::new();
    let mut in_host = false;
    for line in text.lines() {
        if line.trim_start().starts_with("- name:") {
            in_host = line.trim_start() == format!("- name: {name}");
        }
        if in_host && line.trim_start().starts_with("address:") {
            out += &format!("    address: {addr}\n");
        } else {
            out += line;
            out.push('\n');
        }
    }
    assert_ne!(out, text, "no address line for {name}");
    out
}

/// What a node records as its pod CIDR ("" for none).
fn record(lab: &Lab, h: &str) -> String {
    let o = lab.exec(h, "cat /etc/kwinctl/pod-cidr 2>/dev/null || true");
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// A node's kwinctl routes.
fn kroutes(lab: &Lab, h: &str) -> String {
    let o = lab.exec(h, "ip -4 route show proto 198");
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn state(lab: &Lab) -> serde_json::Value {
    let p = lab.dir().join("inventory.kwinctl-state.json");
    serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap()
}

fn failed(o: &std::process::Output) -> Vec<String> {
    summary(o)["failed_hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_mistyped_address_is_no_move_and_nothing_changes() {
    if !require_root() {
        return;
    }
    let lab = Lab::up_mixed(4, 1);
    let i = lab.inv();
    // the cluster is h1, h2, h3 and win1; h4 is an SSH host in known_hosts
    // that is no member
    write(lab.inventory(), &only(&lab, &["h1", "h2", "h3", "win1"]));
    let o = kwinctl(&["up", "-i", &i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let block = state(&lab)["pod_cidrs"]["h3"].as_str().unwrap().to_string();
    let (h3, typo) = (lab.ip("h3"), lab.ip("h4"));
    let routes: Vec<String> = ["h1", "h2"].iter().map(|h| kroutes(&lab, h)).collect();
    let fw = lab.win_state_json("win1")["firewall"].clone();
    assert!(fw.to_string().contains(&h3), "{fw}");

    // h3's address mistyped as h4's
    let inv = std::fs::read_to_string(lab.inventory()).unwrap();
    write(lab.inventory(), &with_address(&inv, "h3", &typo));
    let o = kwinctl(&["plan", "-i", &i]);
    let all = text(&o);
    assert_ne!(o.status.code(), Some(0), "{all}");
    assert!(
        all.contains(&format!(
            "the inventory puts h3 at {typo}, but the cluster knows h3 at {h3} with {block}, and \
             the host at {typo} records no pod CIDR"
        )),
        "{all}"
    );
    assert!(!all.contains("moved from"), "{all}");
    assert!(!all.contains("replace route"), "{all}");

    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(failed(&o), ["h3"], "{}", text(&o));
    // nothing changed: the host at the typo records nothing, the real h3
    // keeps its block, the peers' routes and win1's firewall scope stay
    assert_eq!(record(&lab, "h4"), "", "the typo's host got a record");
    assert_eq!(record(&lab, "h3"), block);
    for (h, r) in ["h1", "h2"].iter().zip(&routes) {
        assert_eq!(&kroutes(&lab, h), r, "{h}'s routes changed");
    }
    assert_eq!(
        lab.win_state_json("win1")["firewall"],
        fw,
        "win1's firewall scope changed"
    );
    let st = state(&lab);
    assert_eq!(st["hosts"]["h3"]["address"], h3.as_str(), "{st}");
    assert_eq!(st["pod_cidrs"]["h3"], block.as_str(), "{st}");

    // the typo fixed: the cluster is whole, nothing to change
    write(lab.inventory(), &inv);
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(summary(&o)["changed"], 0, "{}", text(&o));
}

#[test]
fn a_node_recording_a_silent_node_s_block_is_disputed_and_no_route_moves() {
    if !require_root() {
        return;
    }
    let lab = Lab::up(4);
    let i = lab.inv();
    let o = kwinctl(&["up", "-i", &i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let st = state(&lab);
    let (b3, b4) = (
        st["pod_cidrs"]["h3"].as_str().unwrap().to_string(),
        st["pod_cidrs"]["h4"].as_str().unwrap().to_string(),
    );
    let routes: Vec<String> = ["h1", "h2"].iter().map(|h| kroutes(&lab, h)).collect();
    for r in &routes {
        assert!(r.contains(&format!("{b3} via {} ", lab.ip("h3"))), "{r}");
    }

    // h3 does not answer; a compromised h4 records h3's block
    lab.stop_sshd("h3");
    let w = lab.exec("h4", &format!("echo {b3} > /etc/kwinctl/pod-cidr"));
    assert!(w.status.success());
    let o = kwinctl(&["plan", "-i", &i]);
    let all = text(&o);
    assert!(
        all.contains(&format!("h4 records {b3}, but "))
            && all.contains(&format!("gives {b3} to h3, which did not answer")),
        "{all}"
    );
    assert!(!all.contains("a new block is assigned"), "{all}");
    assert!(!all.contains("replace route"), "{all}");

    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    let mut f = failed(&o);
    f.sort();
    assert_eq!(f, ["h3", "h4"], "{}", text(&o));
    assert!(
        text(&o).contains(&format!("gives {b3} to h3, which did not answer")),
        "{}",
        text(&o)
    );
    for (h, r) in ["h1", "h2"].iter().zip(&routes) {
        assert_eq!(&kroutes(&lab, h), r, "{h}'s routes moved");
    }
    // the state file keeps h3's block for h3 and h4's for h4
    let st = state(&lab);
    assert_eq!(st["pod_cidrs"]["h3"], b3.as_str(), "{st}");
    assert_eq!(st["pod_cidrs"]["h4"], b4.as_str(), "{st}");

    // h3 back: two records of one block, still no route moved
    lab.start_sshd("h3");
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
    for (h, r) in ["h1", "h2"].iter().zip(&routes) {
        assert_eq!(&kroutes(&lab, h), r, "{h}'s routes moved");
    }
}

#[test]
fn a_node_carrying_a_fake_route_fails_and_the_victim_s_routes_come_back() {
    if !require_root() {
        return;
    }
    let lab = Lab::up(4);
    let i = lab.inv();
    let o = kwinctl(&["up", "-i", &i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let b2 = state(&lab)["pod_cidrs"]["h2"].as_str().unwrap().to_string();
    let nowhere = format!("{}.99", lab.net3());
    // a compromised h4 routes h2's block via an address no host has; h1
    // lost its route to h2's pods
    let o = lab.exec(
        "h4",
        &format!("ip route replace {b2} via {nowhere} proto 198"),
    );
    assert!(o.status.success(), "{}", text(&o));
    let o = lab.exec("h1", &format!("ip route del {b2}"));
    assert!(o.status.success(), "{}", text(&o));

    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(failed(&o), ["h4"], "{}", text(&o));
    assert!(
        text(&o).contains(&format!(
            "the node carries a kwinctl route to {b2}, h2's block, via {nowhere}"
        )),
        "{}",
        text(&o)
    );
    assert!(
        kroutes(&lab, "h1").contains(&format!("{b2} via {} ", lab.ip("h2"))),
        "h1's route to h2's pods was not restored: {}",
        kroutes(&lab, "h1")
    );
    let o = kwinctl(&["verify", "-i", &i, "--output", "json"]);
    assert!(
        !failed(&o).contains(&"h2".to_string()),
        "verify blames h2: {}",
        text(&o)
    );
}
