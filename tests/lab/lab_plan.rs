//! `plan` says what `up` then does: on the first run (before the cluster has
//! an id) and when a node is added, also while a host's key is not known
//! yet (the guide's first `plan`); host by host, its planned actions are
//! the ones `up` then makes, and it writes nothing anywhere.

use std::collections::BTreeMap;
use std::path::Path;

use crate::common;
use common::lab::{Lab, require_root};
use common::{actions, host, kwinctl, summary, text, write};

/// Each host's actions with this status, by host name.
fn per_host(o: &std::process::Output, status: &str) -> BTreeMap<String, Vec<String>> {
    let s = summary(o);
    s["hosts"]
        .as_array()
        .expect("hosts")
        .iter()
        .map(|h| {
            let name = h["host"].as_str().unwrap().to_string();
            (name, actions(h, status))
        })
        .collect()
}

/// `known_hosts` without the line of `ip` (the operator has not accepted
/// that host's key yet).
fn forget_key(known_hosts: &Path, ip: &str) {
    let kept: String = std::fs::read_to_string(known_hosts)
        .unwrap()
        .lines()
        .filter(|l| l.split_whitespace().next() != Some(ip))
        .map(|l| format!("{l}\n"))
        .collect();
    write(known_hosts, &kept);
}

/// What `plan` must leave as it was: the operator's folder (known_hosts,
/// no state file, no lock) and the Linux hosts' /etc/kwinctl.
fn untouched(lab: &Lab, names: &[&str]) -> Vec<String> {
    let mut seen: Vec<String> = names
        .iter()
        .map(|h| {
            let o = lab.exec(
                h,
                "ls -la /etc/kwinctl 2>&1; cat /etc/kwinctl/* 2>/dev/null",
            );
            String::from_utf8_lossy(&o.stdout).into_owned()
        })
        .collect();
    let mut files: Vec<String> = std::fs::read_dir(lab.dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        // (its run record, a log of the run, is not the cluster's state)
        .filter(|n| !n.ends_with(".kwinctl-runs"))
        .collect();
    files.sort();
    seen.push(files.join(" "));
    seen.push(std::fs::read_to_string(lab.dir().join("known_hosts")).unwrap());
    seen
}

#[test]
fn the_first_plan_plans_even_hosts_whose_key_is_unknown_and_matches_up() {
    if !require_root() {
        return;
    }
    let lab = Lab::up_mixed(2, 1);
    let i = lab.inv();
    let kh = lab.dir().join("known_hosts");
    let all_keys = std::fs::read_to_string(&kh).unwrap();

    // 1. The guide's first plan: h2's key is not accepted yet. The cluster
    // has no id; the hosts that answer are planned as the first `up` would
    // change them, h2 (not asked) as a new node with its block pending.
    forget_key(&kh, &lab.ip("h2"));
    let before = untouched(&lab, &["h1", "h2"]);
    let partial = kwinctl(&["plan", "-i", &i, "--output", "json"]);
    let out = text(&partial);
    assert!(!out.contains("no id yet"), "{out}");
    assert!(out.contains("h2: host key not known yet"), "{out}");
    let s = summary(&partial);
    assert_eq!(s["failed_hosts"], serde_json::json!(["h2"]), "{out}");
    assert_eq!(host(&s, "h2")["pod_cidr_pending"], true, "{out}");
    for h in ["h1", "win1"] {
        assert_eq!(host(&s, h)["status"], "pending", "{h}: {out}");
    }
    assert_eq!(
        untouched(&lab, &["h1", "h2"]),
        before,
        "plan wrote something"
    );

    // 2. With every key known the first plan succeeds.
    write(&kh, &all_keys);
    let before = untouched(&lab, &["h1", "h2"]);
    let full = kwinctl(&["plan", "-i", &i, "--output", "json"]);
    assert_eq!(full.status.code(), Some(0), "{}", text(&full));
    assert_eq!(
        untouched(&lab, &["h1", "h2"]),
        before,
        "plan wrote something"
    );

    // 3. The first up makes exactly what each plan said, host by host (the
    // partial plan for every host it could ask).
    let up = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(up.status.code(), Some(0), "{}", text(&up));
    let made = per_host(&up, "changed");
    let planned = per_host(&full, "planned");
    assert_eq!(planned, made, "{}\n{}", text(&full), text(&up));
    let partly = per_host(&partial, "planned");
    for h in ["h1", "win1"] {
        assert!(!made[h].is_empty());
        assert_eq!(partly[h], made[h], "{h}: {out}\n{}", text(&up));
    }
}

#[test]
fn adding_a_node_plan_counts_what_up_then_changes_host_by_host() {
    if !require_root() {
        return;
    }
    let lab = Lab::up_mixed(3, 1);
    let inv = std::fs::read_to_string(lab.inventory()).unwrap();
    // the running cluster: h1, h2, win1
    let (head, h3) = inv.split_once("  - name: h3\n").unwrap();
    let (h3_entry, rest) = h3.split_once("  - name: win1\n").unwrap();
    let base = format!("{head}  - name: win1\n{rest}");
    let i = lab.dir().join("add.yaml");
    let i = i.to_str().unwrap();
    write(Path::new(i), &base);
    let o = kwinctl(&["up", "-i", i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));

    // h3 is added, its key not accepted yet (as the guide's "add a node")
    write(Path::new(i), &format!("{base}  - name: h3\n{h3_entry}"));
    let kh = lab.dir().join("known_hosts");
    forget_key(&kh, &lab.ip("h3"));
    let before = untouched(&lab, &["h1", "h2", "h3"]);
    let plan = kwinctl(&["plan", "-i", i, "--output", "json"]);
    let out = text(&plan);
    assert_eq!(
        untouched(&lab, &["h1", "h2", "h3"]),
        before,
        "plan wrote something"
    );
    let s = summary(&plan);
    assert_eq!(s["failed_hosts"], serde_json::json!(["h3"]), "{out}");
    assert_eq!(host(&s, "h3")["pod_cidr_pending"], true, "{out}");

    let up = kwinctl(&["up", "-i", i, "--accept-new-host-keys", "--output", "json"]);
    assert_eq!(up.status.code(), Some(0), "{}", text(&up));
    let made = per_host(&up, "changed");
    let planned = per_host(&plan, "planned");
    // every peer gets the route to h3's new block, as planned
    for h in ["h1", "h2", "win1"] {
        assert!(
            made[h].iter().any(|a| a.contains(&lab.ip("h3"))),
            "{h}: {:?}",
            made[h]
        );
        assert_eq!(planned[h], made[h], "{h}: {out}\n{}", text(&up));
    }
    assert!(!made["h3"].is_empty());
}
