//! The cluster's truth lives on the nodes (issue: no lost state file, second
//! operator or removed host may ever reroute pods), on real lab hosts: a
//! lost state file with the hosts reordered changes nothing; a bad state file
//! is refused; two inventories adding hosts at once never hand out one
//! block; a removed host keeps its block until `reset` reaches it by name;
//! `up --limit NEW` never succeeds silently with peers lacking routes;
//! `--only-failed` survives a `plan`, a `verify` and a SIGTERM.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::lab::{Lab, require_root};
use common::{host, kwinctl, summary, text, write};

/// An inventory's text, cut into its head and one block per host.
fn split(inv: &str) -> (String, Vec<String>) {
    let (head, hosts) = inv.split_once("hosts:\n").expect("hosts:");
    let blocks = hosts
        .split("  - name: ")
        .filter(|b| !b.is_empty())
        .map(|b| format!("  - name: {b}"))
        .collect();
    (format!("{head}hosts:\n"), blocks)
}

fn name_of(block: &str) -> &str {
    block["  - name: ".len()..].lines().next().unwrap().trim()
}

/// The inventory with only these hosts, in this order.
fn with_hosts(inv: &str, names: &[&str]) -> String {
    let (head, blocks) = split(inv);
    let mut out = head;
    for n in names {
        out += blocks
            .iter()
            .find(|b| name_of(b) == *n)
            .unwrap_or_else(|| panic!("no {n}"));
    }
    out
}

/// What each node records as its pod CIDR.
fn blocks(lab: &Lab, names: &[&str]) -> Vec<String> {
    names
        .iter()
        .map(|h| {
            let o = lab.exec(h, "cat /etc/kwinctl/pod-cidr 2>/dev/null || true");
            String::from_utf8_lossy(&o.stdout).trim().to_string()
        })
        .collect()
}

/// Each node's kwinctl routes.
fn routes(lab: &Lab, names: &[&str]) -> Vec<String> {
    names
        .iter()
        .map(|h| {
            let o = lab.exec(h, "ip -4 route show proto 198");
            String::from_utf8_lossy(&o.stdout).into_owned()
        })
        .collect()
}

fn state_path(inv: &Path) -> PathBuf {
    inv.with_file_name(format!(
        "{}.kwinctl-state.json",
        inv.file_stem().unwrap().to_string_lossy()
    ))
}

#[test]
fn a_lost_state_file_and_reordered_hosts_change_nothing() {
    if !require_root() {
        return;
    }
    let lab = Lab::up(4);
    let i = lab.inv();
    let all = ["h1", "h2", "h3", "h4"];
    let o = kwinctl(&["up", "-i", &i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let (b0, r0) = (blocks(&lab, &all), routes(&lab, &all));
    // a new laptop: the state file is gone, and the inventory lists h3 first
    std::fs::remove_file(state_path(lab.inventory())).unwrap();
    let inv = std::fs::read_to_string(lab.inventory()).unwrap();
    write(
        lab.inventory(),
        &with_hosts(&inv, &["h3", "h1", "h2", "h4"]),
    );
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s = summary(&o);
    assert_eq!(s["changed"], 0, "{s}");
    assert_eq!(blocks(&lab, &all), b0, "a block moved");
    assert_eq!(routes(&lab, &all), r0, "a route changed");
    // the state file was rebuilt from what the nodes record
    let st: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(state_path(lab.inventory())).unwrap())
            .unwrap();
    for (h, b) in all.iter().zip(&b0) {
        assert_eq!(st["pod_cidrs"][h], *b, "{st}");
    }
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("the state file had none: adopted"),
        "{}",
        text(&o)
    );
}

#[test]
fn a_state_file_with_host_bits_or_of_another_cluster_is_refused() {
    if !require_root() {
        return;
    }
    let lab = Lab::up(2);
    let i = lab.inv();
    let o = kwinctl(&["up", "-i", &i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let sp = state_path(lab.inventory());
    let good = std::fs::read_to_string(&sp).unwrap();
    let r0 = routes(&lab, &["h1", "h2"]);
    let h2 = blocks(&lab, &["h2"]).remove(0);
    let bits = h2.replace(".0/24", ".1/24");
    for (bad, want) in [
        (good.replacen(&h2, &bits, 1), "has host bits set"),
        (
            good.replacen("\"cluster\": \"lab", "\"cluster\": \"prod-east-lab", 1),
            "is cluster \"prod-east-lab",
        ),
    ] {
        assert_ne!(bad, good);
        write(&sp, &bad);
        for cmd in ["check", "up"] {
            let o = kwinctl(&[cmd, "-i", &i]);
            assert_eq!(o.status.code(), Some(2), "{cmd}: {}", text(&o));
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(err.contains(want), "{err}");
            // file:line:column, and how to fix it
            assert!(err.contains("kwinctl-state.json:"), "{err}");
            assert!(
                err.contains("fix:") && !err.contains("move it away"),
                "{err}"
            );
        }
        assert_eq!(routes(&lab, &["h1", "h2"]), r0, "a route changed");
    }
}

#[test]
fn two_inventories_adding_hosts_at_once_never_share_a_block() {
    if !require_root() {
        return;
    }
    let lab = Lab::up(5);
    let inv = std::fs::read_to_string(lab.inventory()).unwrap();
    // the cluster as both operators have it: h1..h3, converged
    let base = lab.dir().join("base");
    std::fs::create_dir(&base).unwrap();
    write(
        &base.join("inv.yaml"),
        &with_hosts(&inv, &["h1", "h2", "h3"]),
    );
    let o = kwinctl(&["up", "-i", base.join("inv.yaml").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let state = std::fs::read_to_string(base.join("inv.kwinctl-state.json")).unwrap();
    // operator A adds h4, operator B adds h5, each in a copy of the folder
    let folder = |name: &str, hosts: &[&str]| {
        let d = lab.dir().join(name);
        std::fs::create_dir(&d).unwrap();
        write(&d.join("inv.yaml"), &with_hosts(&inv, hosts));
        write(&d.join("inv.kwinctl-state.json"), &state);
        d.join("inv.yaml").to_string_lossy().into_owned()
    };
    let a = folder("a", &["h1", "h2", "h3", "h4"]);
    let b = folder("b", &["h1", "h2", "h3", "h5"]);
    let spawn = |i: &str| {
        Command::new(common::bin())
            .args(["up", "-i", i])
            .env("KWINCTL_SSH_CONFIG", "none")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let (ca, cb) = (spawn(&a), spawn(&b));
    let (oa, ob) = (
        ca.wait_with_output().unwrap(),
        cb.wait_with_output().unwrap(),
    );
    // each converges, or is refused (exit 3) because the other changed the
    // cluster first; a refused one then reconciles
    for (o, i) in [(oa, &a), (ob, &b)] {
        match o.status.code() {
            Some(0) => {}
            Some(3) => {
                let o = kwinctl(&["up", "-i", i]);
                assert_eq!(o.status.code(), Some(0), "{}", text(&o));
            }
            _ => panic!("{}", text(&o)),
        }
    }
    let all = ["h1", "h2", "h3", "h4", "h5"];
    let held = blocks(&lab, &all);
    let mut unique = held.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), 5, "two nodes record one block: {held:?}");
    // later runs of either never flip routes: each leaves the other's node alone
    let r0 = routes(&lab, &all);
    for i in [&a, &b, &a] {
        let o = kwinctl(&["up", "-i", i, "--output", "json"]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        assert_eq!(summary(&o)["changed"], 0, "{}", text(&o));
    }
    assert_eq!(routes(&lab, &all), r0);
    // h1 routes both new nodes' blocks to them
    let h1 = &routes(&lab, &["h1"])[0];
    assert!(
        h1.contains(&format!("{} via {}", held[3], lab.ip("h4"))),
        "{h1}"
    );
    assert!(
        h1.contains(&format!("{} via {}", held[4], lab.ip("h5"))),
        "{h1}"
    );
    // a symlink to A's inventory is A's inventory: same state, same lock
    let link = lab.dir().join("link.yaml");
    std::os::unix::fs::symlink(&a, &link).unwrap();
    let o = kwinctl(&["check", "-i", link.to_str().unwrap(), "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        v["hosts"]
            .as_array()
            .unwrap()
            .iter()
            .all(|h| h["source"] == "state"),
        "{v}"
    );
    assert!(!lab.dir().join("link.kwinctl-state.json").exists());
}

#[test]
fn a_removed_host_keeps_its_block_until_reset_reaches_it_by_name() {
    if !require_root() {
        return;
    }
    let lab = Lab::up(5);
    let i = lab.inv();
    let inv = std::fs::read_to_string(lab.inventory()).unwrap();
    write(
        lab.inventory(),
        &with_hosts(&inv, &["h1", "h2", "h3", "h4"]),
    );
    let o = kwinctl(&["up", "-i", &i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let h4 = blocks(&lab, &["h4"]).remove(0);
    // h4 leaves the inventory: the others drop their routes to it
    write(lab.inventory(), &with_hosts(&inv, &["h1", "h2", "h3"]));
    let o = kwinctl(&["up", "-i", &i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("removed host h4") && err.contains("reset --limit h4"),
        "{err}"
    );
    assert!(!routes(&lab, &["h1"])[0].contains(&h4));
    assert_eq!(blocks(&lab, &["h4"])[0], h4, "h4 still holds its block");
    // h5 joins: it does not get h4's block
    write(
        lab.inventory(),
        &with_hosts(&inv, &["h1", "h2", "h3", "h5"]),
    );
    let o = kwinctl(&["up", "-i", &i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_ne!(blocks(&lab, &["h5"])[0], h4);
    // other commands name it, and only reset reaches it
    let o = kwinctl(&["plan", "-i", &i, "--limit", "h4"]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("`kwinctl reset --limit h4`"));
    let o = kwinctl(&[
        "reset", "--yes", "-i", &i, "--limit", "h4", "--output", "json",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(host(&summary(&o), "h4")["status"], "changed");
    assert_eq!(blocks(&lab, &["h4"])[0], "", "h4 was not reset");
    assert!(routes(&lab, &["h4"])[0].is_empty());
    let st = std::fs::read_to_string(state_path(lab.inventory())).unwrap();
    assert!(!st.contains("\"h4\""), "{st}");
    // the block is free again
    let o = kwinctl(&["plan", "-i", &i]);
    assert!(!String::from_utf8_lossy(&o.stderr).contains("removed host h4"));
}

#[test]
fn up_limited_to_a_new_host_never_leaves_its_peers_behind_silently() {
    if !require_root() {
        return;
    }
    let lab = Lab::up(3);
    let i = lab.inv();
    let inv = std::fs::read_to_string(lab.inventory()).unwrap();
    write(lab.inventory(), &with_hosts(&inv, &["h1", "h2"]));
    let o = kwinctl(&["up", "-i", &i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    write(lab.inventory(), &inv);
    let o = kwinctl(&["up", "-i", &i, "--limit", "h3", "--output", "json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let s = summary(&o);
    assert_eq!(host(&s, "h3")["status"], "changed", "{s}");
    assert_eq!(s["failed_hosts"], serde_json::json!(["h1", "h2"]), "{s}");
    let e = host(&s, "h1")["error"].as_str().unwrap();
    assert!(
        e.contains("add route") && e.contains("--with-peer-routes"),
        "{e}"
    );
    let h3 = blocks(&lab, &["h3"]).remove(0);
    assert!(!routes(&lab, &["h1"])[0].contains(&h3));
    // asked for, the peers get just those routes
    let o = kwinctl(&["up", "-i", &i, "--limit", "h3", "--with-peer-routes"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(routes(&lab, &["h1"])[0].contains(&format!("{h3} via {}", lab.ip("h3"))));
    // progress counts the selected host only; the peers are said apart
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("[1/1] h3: "), "{err}");
    assert!(!err.contains("[2/1]") && !err.contains("[3/1]"), "{err}");
    assert!(err.contains("[outside --limit] h1: "), "{err}");
    let o = kwinctl(&["verify", "-i", &i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

/// Run `kwinctl up` as a child; `--parallel 1` keeps the hosts in order.
fn spawn_up(i: &str) -> std::process::Child {
    Command::new(common::bin())
        .args(["up", "-i", i, "--parallel", "1"])
        .env("KWINCTL_SSH_CONFIG", "none")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

fn hosts_of(o: &std::process::Output) -> Vec<String> {
    summary(o)["hosts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["host"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn only_failed_survives_plan_verify_and_sigterm() {
    if !require_root() {
        return;
    }
    let lab = Lab::up(3);
    let i = lab.inv();
    // h2 cannot add routes
    lab.fake_command(
        "h2",
        "ip",
        "#!/bin/sh\ncase \"$*\" in *replace*|*-batch*) echo 'RTNETLINK answers: Operation not permitted' >&2; exit 2;; esac\nexec /usr/bin/ip \"$@\"\n",
    );
    let o = kwinctl(&["up", "-i", &i]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    // read-only runs in between do not make kwinctl forget
    let o = kwinctl(&["plan", "-i", &i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = kwinctl(&["verify", "-i", &i]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    std::fs::remove_file(lab.dir().join("hosts/h2/usr-local-bin/ip")).unwrap();
    let o = kwinctl(&["up", "-i", &i, "--only-failed", "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(hosts_of(&o), ["h2"]);

    // every host needs work again; h2 blocks mid-script; SIGTERM twice
    for h in ["h1", "h2", "h3"] {
        assert!(lab.exec(h, "ip route flush proto 198").status.success());
    }
    let etc2 = lab.dir().join("hosts/h2/etc-kwinctl");
    let fifo = etc2.join("block");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    lab.fake_command(
        "h2",
        "ip",
        "#!/bin/sh\ncase \"$*\" in *replace*|*-batch*) touch /etc/kwinctl/blocked; cat /etc/kwinctl/block >/dev/null;; esac\nexec /usr/bin/ip \"$@\"\n",
    );
    let mut child = spawn_up(&i);
    let start = Instant::now();
    while !etc2.join("blocked").exists() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "h2 never blocked"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    for _ in 0..2 {
        let st = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap();
        assert!(st.success());
        std::thread::sleep(Duration::from_millis(200));
    }
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        assert!(Instant::now() < deadline, "kwinctl did not stop on SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(child.wait().unwrap().code(), Some(143));
    // release h2's script, then: h1 was done; h2 and h3 were not
    let _ = Command::new("timeout")
        .args(["5", "sh", "-c", "echo > \"$0\""])
        .arg(&fifo)
        .status();
    std::fs::remove_file(lab.dir().join("hosts/h2/usr-local-bin/ip")).unwrap();
    // the run that quit at once left its cluster lock (its lease runs on):
    // the operator, who knows it is gone, breaks it
    let o = kwinctl(&["unlock", "-i", &i, "--yes"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("broke the cluster lock on h1"));
    let o = kwinctl(&["up", "-i", &i, "--only-failed", "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(hosts_of(&o), ["h2", "h3"]);
    // and with nothing left, it says so
    let o = kwinctl(&["up", "-i", &i, "--only-failed"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(String::from_utf8_lossy(&o.stderr).contains("left nothing to do"));
}

#[test]
fn new_hosts_that_answer_are_not_held_up_by_new_hosts_that_do_not() {
    if !require_root() {
        return;
    }
    let lab = Lab::up(4);
    let i = lab.inv();
    let inv = std::fs::read_to_string(lab.inventory()).unwrap();
    // the cluster: h1 (the lock host) and h2; then h3 and h4 join
    write(lab.inventory(), &with_hosts(&inv, &["h1", "h2"]));
    let o = kwinctl(&["up", "-i", &i, "--reach", "none"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    write(lab.inventory(), &inv);
    // h3 and the lock host silent: nothing proves what h3 holds, and h4
    // waits for it (kwinctl does not guess)
    lab.stop_sshd("h1");
    lab.stop_sshd("h3");
    let o = kwinctl(&["up", "-i", &i, "--reach", "none", "--output", "json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let e = host(&summary(&o), "h4")["error"].to_string();
    assert!(e.contains("will not guess"), "{e}");
    // the lock host answers: its registry proves h3 holds no block, and h4
    // gets one
    lab.start_sshd("h1");
    let o = kwinctl(&["up", "-i", &i, "--reach", "none", "--output", "json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let s = summary(&o);
    assert_eq!(host(&s, "h4")["status"], "changed", "{s}");
    assert_eq!(host(&s, "h3")["status"], "failed", "{s}");
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("h3 did not answer and holds no block"),
        "{}",
        text(&o)
    );
    let held = blocks(&lab, &["h1", "h2", "h4"]);
    let mut unique = held.clone();
    unique.sort();
    unique.dedup();
    assert!(unique.len() == 3 && !held[2].is_empty(), "{held:?}");
    // h3 answers again: it gets a block of its own
    lab.start_sshd("h3");
    let o = kwinctl(&["up", "-i", &i, "--reach", "none"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let all = blocks(&lab, &["h1", "h2", "h4", "h3"]);
    assert_eq!(&all[..3], &held[..], "the others kept their blocks");
    assert!(!all[3].is_empty() && !held.contains(&all[3]), "{all:?}");
}
