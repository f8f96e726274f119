//! Moving a node to a new address: `up` recognises it by its name, its
//! record and the state file, keeps its block, and moves every peer's route
//! to the new next hop (Linux and simulated Windows peers alike); `plan`
//! says it is a move.

use crate::common;

use common::lab::{Lab, require_root};
use common::{kwinctl, summary, text, write};

/// Set one host's `address:` in the lab inventory.
fn set_address(lab: &Lab, name: &str, addr: &str) {
    let inv = std::fs::read_to_string(lab.inventory()).unwrap();
    let mut out = String::new();
    let mut in_host = false;
    for line in inv.lines() {
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
    assert_ne!(out, inv, "no address line for {name}");
    write(lab.inventory(), &out);
}

#[test]
fn a_node_moved_to_a_new_address_keeps_its_block_and_every_peer_follows() {
    if !require_root() {
        return;
    }
    let mut lab = Lab::up_mixed(2, 1);
    let i = lab.inv();
    let o = kwinctl(&["up", "-i", &i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let state = lab.dir().join("inventory.kwinctl-state.json");
    let block = |s: &std::path::Path| -> String {
        let st: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(s).unwrap()).unwrap();
        st["pod_cidrs"]["h2"].as_str().unwrap().to_string()
    };
    let h2_block = block(&state);
    let old = lab.ip("h2");
    let new = format!("{}.50", lab.net3());
    lab.readdress("h2", &new);
    set_address(&lab, "h2", &new);

    // plan: a move, not a dispute; the peers' routes move to the new hop
    let o = kwinctl(&["plan", "-i", &i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let all = text(&o);
    assert!(
        all.contains(&format!(
            "h2 moved from {old} to {new}: it keeps {h2_block}"
        )),
        "{all}"
    );
    assert!(!all.contains("disputed"), "{all}");
    // the summary counts what plan would change, not "0 changed"
    assert!(
        all.contains("would change ") && !all.contains(" 0 changed"),
        "{all}"
    );
    assert!(
        all.contains(&format!(
            "replace route {h2_block} via {old} with via {new}"
        )),
        "{all}"
    );

    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(
        summary(&o)["failed_hosts"],
        serde_json::json!([]),
        "{}",
        text(&o)
    );
    assert_eq!(block(&state), h2_block, "h2 kept its block");

    // every peer routes h2's block via the new address, none via the old
    for peer in ["h1", "win1"] {
        let routes =
            String::from_utf8_lossy(&lab.exec(peer, "ip -4 route show").stdout).into_owned();
        assert!(
            routes.contains(&format!("{h2_block} via {new} ")),
            "{peer}: {routes}"
        );
        assert!(
            !routes.contains(&format!("via {old} ")),
            "{peer} still routes via the old address: {routes}"
        );
    }
    let ws = lab.win_state_json("win1");
    let persistent = ws["persistent_routes"].to_string();
    assert!(
        persistent.contains(&new) && !persistent.contains(&format!("\"{old}\"")),
        "{persistent}"
    );
    // and the cluster is whole: verify passes, a second up changes nothing
    let o = kwinctl(&["verify", "-i", &i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(summary(&o)["changed"], 0, "{}", text(&o));
    let o = kwinctl(&["plan", "-i", &i]);
    assert!(!text(&o).contains("moved from"), "{}", text(&o));
}
