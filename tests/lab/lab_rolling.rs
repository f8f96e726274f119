//! A kubelet upgrade of running Windows nodes (issue 36, items 3 and 4):
//! one node at a time, cordon and drain through the control plane's
//! kubectl (the lab's stand-in: upstream's rules, docs/research/upgrade.md),
//! the binaries replaced, the node Ready at the new release, uncordon; a
//! PodDisruptionBudget that blocks the drain stops the node before anything
//! is replaced; a new kubelet that cannot start or never reports Ready is
//! rolled back to the binaries kept beside it, its node left cordoned.

use crate::common;

use common::lab::{Lab, require_root};
use common::{kwinctl, kwinctl_env, text, write};

use super::lab_skew::{declare, kubelet_on};

pub(super) const DNS_IP: &str = "198.18.240.10";
pub(super) const DOMAIN: &str = "cluster.local";
const AGNHOST: &str = "registry.k8s.io/e2e-test-images/agnhost:2.52";

/// An l2bridge lab at 1.30.4 with `windows` Windows nodes, converged, whose
/// API server already runs 1.31.2; the inventory then declares 1.31.2.
pub(super) fn upgraded_lab(windows: &[&str]) -> Lab {
    let lab = Lab::up_windows_builds_env(
        1,
        windows,
        Some("Installed"),
        &[
            ("KWINCTL_LAB_K8S", "1.30.4"),
            ("KWINCTL_LAB_CONTAINERD", "1.7.20"),
            ("KWINCTL_LAB_K8S_ALSO", "1.31.2"),
        ],
    );
    lab.install_kubectl_server("h1", DNS_IP, DOMAIN, "1.31.2");
    let o = kwinctl(&["up", "-i", &lab.inv(), "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    write(lab.inventory(), &declare(&lab, "1.30.4", "1.31.2"));
    lab
}

pub(super) fn kubectl(lab: &Lab, args: &str) -> std::process::Output {
    lab.exec("h1", &format!("kubectl {args}"))
}

/// Apply `objects` (a v1 List) through the stand-in.
pub(super) fn apply(lab: &Lab, objects: serde_json::Value) {
    let f = lab.dir().join("objects.json");
    std::fs::write(&f, objects.to_string()).unwrap();
    let o = kubectl(lab, &format!("apply -f - < {}", f.display()));
    assert!(o.status.success(), "{}", text(&o));
}

/// A pod a ReplicaSet owns (so that drain evicts it) on `host`'s node
/// (nodes are named by their host name).
pub(super) fn pod(name: &str, host: &str) -> serde_json::Value {
    serde_json::json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": "default", "labels": {"app": name},
                     "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                          "name": name, "controller": true}]},
        "spec": {"nodeName": host, "containers": [
            {"name": "c", "image": AGNHOST, "args": ["netexec", "--http-port=8080"]}]}})
}

/// The stand-in's log: "verb what [detail]" per line, in order.
pub(super) fn log(lab: &Lab) -> Vec<String> {
    std::fs::read_to_string(lab.dir().join("kubectl/log"))
        .unwrap_or_default()
        .lines()
        .map(|l| {
            l.split_once(' ')
                .map(|(_, r)| r.to_string())
                .unwrap_or_default()
        })
        .collect()
}

fn position(log: &[String], line: &str) -> usize {
    log.iter()
        .position(|l| l == line)
        .unwrap_or_else(|| panic!("{line:?} not in the stand-in's log:\n{}", log.join("\n")))
}

/// The commands of docs/operations.md's "Upgrading" (its first `sh` block).
fn upgrading_commands() -> Vec<String> {
    let doc = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/operations.md"))
        .unwrap();
    let section = doc
        .split("\n## Upgrading\n")
        .nth(1)
        .expect("an Upgrading section");
    let block = section.split("```sh\n").nth(1).expect("a sh block");
    block
        .split("```")
        .next()
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

/// docs/operations.md's "Upgrading", walked on the lab: the control plane
/// at the new release, the inventory changed, then its commands in order.
#[test]
fn windows_nodes_are_upgraded_one_at_a_time_as_operations_md_says() {
    if !require_root() {
        return;
    }
    let lab = upgraded_lab(&["2022", "2022"]);
    let (n1, n2) = ("win1".to_string(), "win2".to_string());
    apply(
        &lab,
        serde_json::json!({"apiVersion": "v1", "kind": "List",
            "items": [pod("web-1", "win1"), pod("web-2", "win2")]}),
    );
    let commands = upgrading_commands();
    assert_eq!(commands.len(), 4, "{commands:?}");
    for c in &commands {
        let o = match c.split_whitespace().collect::<Vec<_>>().as_slice() {
            ["kubectl", rest @ ..] => kubectl(&lab, &rest.join(" ")),
            ["kwinctl", cmd, "-i", "cluster.yaml"] => {
                kwinctl(&[cmd, "-i", &lab.inv(), "--output", "json"])
            }
            _ => panic!("a command the walk does not know: {c}"),
        };
        assert_eq!(o.status.code(), Some(0), "{c}: {}", text(&o));
        if c.starts_with("kwinctl plan") {
            assert!(
                text(&o).contains("upgrade kubelet 1.30.4 → 1.31.2 (cordon, drain, restart)"),
                "{}",
                text(&o)
            );
        }
        if c.starts_with("kubectl version") {
            assert!(String::from_utf8_lossy(&o.stdout).contains("Server Version: v1.31.2"));
        }
    }
    for h in ["win1", "win2"] {
        assert_eq!(kubelet_on(&lab, h), "Kubernetes v1.31.2", "{h}");
    }
    // per node, in order: cordon → drain → Ready at 1.31.2 → uncordon; the
    // other node is cordoned (its pod evicted) only once the first is done
    let l = log(&lab);
    let steps = |n: &str, pod: &str| {
        [
            position(&l, &format!("cordon {n}")),
            position(&l, &format!("evict default/{pod} {n}")),
            position(&l, &format!("drained {n}")),
            position(&l, &format!("ready {n} v1.31.2")),
            position(&l, &format!("uncordon {n}")),
        ]
    };
    let (a, b) = (steps(&n1, "web-1"), steps(&n2, "web-2"));
    assert!(a.windows(2).all(|w| w[0] < w[1]), "{}", l.join("\n"));
    assert!(b.windows(2).all(|w| w[0] < w[1]), "{}", l.join("\n"));
    assert!(a[4] < b[0] || b[4] < a[0], "{}", l.join("\n"));
    // nothing to do the next time
    let o = kwinctl(&["up", "-i", &lab.inv(), "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(common::summary(&o)["changed"], 0, "{}", text(&o));
}

#[test]
fn a_budget_that_blocks_the_drain_stops_before_anything_is_replaced() {
    if !require_root() {
        return;
    }
    let lab = upgraded_lab(&["2022"]);
    let n1 = "win1".to_string();
    apply(
        &lab,
        serde_json::json!({"apiVersion": "v1", "kind": "List", "items": [
            pod("db", "win1"),
            {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
             "metadata": {"name": "db", "namespace": "default"},
             "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "db"}}}}]}),
    );
    let o = kwinctl_env(
        &["up", "-i", &lab.inv(), "--output", "json"],
        &[("KWINCTL_DRAIN_TIMEOUT", "6")],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("stopped before anything was replaced")
            && text(&o).contains("default/db blocked it"),
        "{}",
        text(&o)
    );
    // the old kubelet still runs, the pod is still there, the node takes pods again
    assert_eq!(kubelet_on(&lab, "win1"), "Kubernetes v1.30.4");
    assert_eq!(
        lab.win_state_json("win1")["services"]["kubelet"]["status"],
        "Running"
    );
    assert!(kubectl(&lab, "get pod db -o json").status.success());
    let l = log(&lab);
    assert!(
        position(&l, &format!("refuse default/db {n1}")) < position(&l, &format!("uncordon {n1}"))
    );
    assert!(
        !l.iter().any(|x| x.starts_with("evict ")),
        "{}",
        l.join("\n")
    );
}

/// The node's copy of `exe` as winsim records it (its `--version` line).
pub(super) fn binary_on(lab: &Lab, h: &str, exe: &str) -> String {
    lab.win_state_json(h)["file_versions"][format!(r"C:\k\{exe}")]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

/// After a rolled-back upgrade: win1 runs the old kubelet and kube-proxy
/// again, its services running, and its node is cordoned, never uncordoned.
fn rolled_back(lab: &Lab, o: &std::process::Output) {
    let n1 = "win1".to_string();
    assert_eq!(o.status.code(), Some(1), "{}", text(o));
    assert!(
        text(o).contains("rolled back: the kubelet and kube-proxy of release 1.30.4 were put back")
            && text(o).contains("left cordoned"),
        "{}",
        text(o)
    );
    for exe in ["kubelet.exe", "kube-proxy.exe"] {
        assert_eq!(binary_on(lab, "win1", exe), "Kubernetes v1.30.4", "{exe}");
    }
    let st = lab.win_state_json("win1");
    for svc in ["kubelet", "kube-proxy"] {
        assert_eq!(st["services"][svc]["status"], "Running", "{svc}: {st}");
    }
    let l = log(lab);
    assert!(
        position(&l, &format!("cordon {n1}")) < position(&l, &format!("drained {n1}")),
        "{}",
        l.join("\n")
    );
    assert!(
        !l.iter().any(|x| x == &format!("uncordon {n1}")),
        "{}",
        l.join("\n")
    );
    let node = node_json(lab, &n1);
    assert_eq!(node["spec"]["unschedulable"], true, "{node}");
}

#[test]
fn a_new_kubelet_that_cannot_start_is_rolled_back_and_left_cordoned() {
    if !require_root() {
        return;
    }
    let lab = upgraded_lab(&["2022"]);
    apply(
        &lab,
        serde_json::json!({"apiVersion": "v1", "kind": "List", "items": [pod("web-1", "win1")]}),
    );
    // the new kubelet exits as soon as it starts (winsim's knob): the
    // change fails after its binaries were replaced
    let mut st = lab.win_state_json("win1");
    st["kubelet_start_fails"] = serde_json::json!(["1.31.2"]);
    write(&lab.win_state("win1"), &st.to_string());
    let o = kwinctl_env(
        &["up", "-i", &lab.inv(), "--output", "json"],
        &[("KWINCTL_READY_WAIT", "4")],
    );
    rolled_back(&lab, &o);
    assert_eq!(marked(&lab, "win1"), Some("1.31.2".into()));
    // fixed, the rerun finishes the upgrade: drained again (nothing left to
    // evict), Ready at 1.31.2, uncordoned, its mark gone
    let mut st = lab.win_state_json("win1");
    st["kubelet_start_fails"] = serde_json::json!([]);
    write(&lab.win_state("win1"), &st.to_string());
    let o = kwinctl(&["up", "-i", &lab.inv(), "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(kubelet_on(&lab, "win1"), "Kubernetes v1.31.2");
    let l = log(&lab);
    assert!(
        position(&l, "ready win1 v1.31.2") < position(&l, "uncordon win1"),
        "{}",
        l.join("\n")
    );
    assert_eq!(
        l.iter()
            .filter(|x| *x == "evict default/web-1 win1")
            .count(),
        1,
        "{}",
        l.join("\n")
    );
    assert_eq!(
        node_json(&lab, "win1")["spec"]["unschedulable"],
        serde_json::Value::Null
    );
    assert_eq!(marked(&lab, "win1"), None);
}

/// A node as the stand-in lists it.
pub(super) fn node_json(lab: &Lab, name: &str) -> serde_json::Value {
    let nodes = kubectl(lab, "get nodes -o json");
    let nodes: serde_json::Value = serde_json::from_slice(&nodes.stdout).expect("nodes JSON");
    nodes["items"]
        .as_array()
        .unwrap()
        .iter()
        .find(|n| n["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no node {name}: {nodes}"))
        .clone()
}

/// kwinctl's mark on a node (the release it was cordoned for).
pub(super) fn marked(lab: &Lab, name: &str) -> Option<String> {
    node_json(lab, name)["metadata"]["annotations"]["kwinctl.io/upgrade"]
        .as_str()
        .map(str::to_string)
}

/// A run stopped after a node's new kubelet was Ready but before it was
/// uncordoned leaves it cordoned with kwinctl's mark: the next `up`
/// uncordons it. A node someone else cordoned stays cordoned.
#[test]
fn a_rerun_uncordons_only_the_nodes_kwinctl_left_cordoned() {
    if !require_root() {
        return;
    }
    let lab = upgraded_lab(&["2022", "2022"]);
    let o = kwinctl(&["up", "-i", &lab.inv(), "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    // as a run killed between the Ready wait and the uncordon leaves it
    for c in [
        "cordon win1",
        "annotate node win1 --overwrite kwinctl.io/upgrade=1.31.2",
        "cordon win2",
    ] {
        let o = kubectl(&lab, c);
        assert!(o.status.success(), "{c}: {}", text(&o));
    }
    let o = kwinctl(&["up", "-i", &lab.inv(), "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        text(&o).contains(
            "upgrade finished: node win1, which an earlier run left cordoned, is Ready at v1.31.2 and was uncordoned"
        ),
        "{}",
        text(&o)
    );
    assert_eq!(
        node_json(&lab, "win1")["spec"]["unschedulable"],
        serde_json::Value::Null
    );
    assert_eq!(marked(&lab, "win1"), None);
    assert_eq!(node_json(&lab, "win2")["spec"]["unschedulable"], true);
}

#[test]
fn a_kubelet_that_never_reports_ready_is_rolled_back_and_left_cordoned() {
    if !require_root() {
        return;
    }
    let lab = upgraded_lab(&["2022"]);
    // from now on a node reports Ready only 600s after its kubelet started:
    // the new kubelet runs, but not Ready within KWINCTL_READY_WAIT
    lab.install_kubectl_server_ready_after("h1", DNS_IP, DOMAIN, "1.31.2", 600);
    let o = kwinctl_env(
        &["up", "-i", &lab.inv(), "--output", "json"],
        &[("KWINCTL_READY_WAIT", "4")],
    );
    assert!(
        text(&o).contains("did not report Ready at 1.31.2 within 4s"),
        "{}",
        text(&o)
    );
    rolled_back(&lab, &o);
    // the copy kept beside it is still the old release, for the next attempt
    assert_eq!(
        binary_on(&lab, "win1", "kubelet.exe.previous"),
        "Kubernetes v1.30.4"
    );
}

/// `up` killed with SIGKILL while a node's new kubelet is not Ready yet
/// (cordoned, drained, replaced), then run again: every node is finished,
/// uncordoned, and nothing is done twice (no pod evicted twice, no binary
/// replaced twice: the copy kept beside each kubelet is still 1.30.4's).
#[test]
fn a_run_killed_mid_upgrade_is_finished_by_the_next_with_nothing_done_twice() {
    if !require_root() {
        return;
    }
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};
    let lab = upgraded_lab(&["2022", "2022"]);
    apply(
        &lab,
        serde_json::json!({"apiVersion": "v1", "kind": "List",
            "items": [pod("web-1", "win1"), pod("web-2", "win2")]}),
    );
    // a node reports Ready only 600s after its kubelet started: the run
    // waits for the first node's new kubelet
    lab.install_kubectl_server_ready_after("h1", DNS_IP, DOMAIN, "1.31.2", 600);
    let mut child = Command::new(common::bin())
        .args(["up", "-i", &lab.inv()])
        .env("KWINCTL_SSH_CONFIG", "none")
        .env_remove("SSH_AUTH_SOCK")
        .env("KWINCTL_READY_WAIT", "300")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let waiting = loop {
        let l = log(&lab);
        if let Some(n) = l
            .iter()
            .find_map(|x| x.strip_prefix("not-ready ")?.strip_suffix(" v1.31.2"))
        {
            break n.to_string();
        }
        if start.elapsed() > Duration::from_secs(150) || child.try_wait().unwrap().is_some() {
            let _ = child.kill();
            panic!("no node waited at v1.31.2:\n{}", l.join("\n"));
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    child.kill().unwrap();
    child.wait().unwrap();
    assert_eq!(node_json(&lab, &waiting)["spec"]["unschedulable"], true);
    assert_eq!(marked(&lab, &waiting), Some("1.31.2".into()));
    // nodes Ready again as soon as their kubelet runs; the killed run's lock
    // broken
    lab.install_kubectl_server("h1", DNS_IP, DOMAIN, "1.31.2");
    let o = kwinctl(&["unlock", "-i", &lab.inv(), "--yes"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = kwinctl(&["up", "-i", &lab.inv(), "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let l = log(&lab);
    for (h, web) in [("win1", "web-1"), ("win2", "web-2")] {
        assert_eq!(kubelet_on(&lab, h), "Kubernetes v1.31.2", "{h}");
        assert_eq!(
            binary_on(&lab, h, "kubelet.exe.previous"),
            "Kubernetes v1.30.4",
            "{h}: replaced twice"
        );
        let st = lab.win_state_json(h);
        for svc in ["kubelet", "kube-proxy"] {
            assert_eq!(st["services"][svc]["status"], "Running", "{h} {svc}");
        }
        assert_eq!(
            node_json(&lab, h)["spec"]["unschedulable"],
            serde_json::Value::Null
        );
        assert_eq!(marked(&lab, h), None, "{h}");
        let evicted = format!("evict default/{web} {h}");
        assert_eq!(
            l.iter().filter(|x| **x == evicted).count(),
            1,
            "{}",
            l.join("\n")
        );
    }
}

/// Ctrl-C while a budget holds the drain back ends the run at once, long
/// before KWINCTL_DRAIN_TIMEOUT: nothing replaced, the node left cordoned
/// with kwinctl's mark (a rerun finishes it).
#[test]
fn ctrl_c_during_the_drain_ends_it_and_leaves_the_node_marked() {
    if !require_root() {
        return;
    }
    use std::process::{Command, Stdio};
    use std::time::{Duration, Instant};
    let lab = upgraded_lab(&["2022"]);
    apply(
        &lab,
        serde_json::json!({"apiVersion": "v1", "kind": "List", "items": [
            pod("db", "win1"),
            {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
             "metadata": {"name": "db", "namespace": "default"},
             "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "db"}}}}]}),
    );
    let mut child = Command::new(common::bin())
        .args(["up", "-i", &lab.inv(), "--output", "json"])
        .env("KWINCTL_SSH_CONFIG", "none")
        .env_remove("SSH_AUTH_SOCK")
        .env("KWINCTL_DRAIN_TIMEOUT", "300")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while !log(&lab).iter().any(|x| x == "refuse default/db win1") {
        if start.elapsed() > Duration::from_secs(150) || child.try_wait().unwrap().is_some() {
            let _ = child.kill();
            panic!("the drain was not refused:\n{}", log(&lab).join("\n"));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    let st = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let sent = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if sent.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            panic!("kwinctl did not stop within 30s of SIGINT");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let o = child.wait_with_output().unwrap();
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
    assert!(
        text(&o)
            .contains("interrupted during the drain: the drain was ended; nothing was replaced"),
        "{}",
        text(&o)
    );
    assert_eq!(kubelet_on(&lab, "win1"), "Kubernetes v1.30.4");
    assert_eq!(node_json(&lab, "win1")["spec"]["unschedulable"], true);
    assert_eq!(marked(&lab, "win1"), Some("1.31.2".into()));
}

/// `up --verify-pods` (issue 36, item 3): once the upgraded node is Ready,
/// a test pod pinned to it must pass before it is uncordoned. Under a new
/// kubelet whose pods get no network (winsim's knob) the node is rolled
/// back and left cordoned, exit 1; fixed, the rerun upgrades it, the pod
/// check passes, and it is uncordoned.
#[test]
fn verify_pods_rolls_back_a_node_whose_pods_fail_and_uncordons_one_whose_pass() {
    if !require_root() {
        return;
    }
    let lab = upgraded_lab(&["2022"]);
    let inv = std::fs::read_to_string(lab.inventory()).unwrap();
    assert!(!inv.contains("pod_check"), "{inv}");
    write(
        lab.inventory(),
        &inv.replacen(
            "cluster:\n",
            "cluster:\n  pod_check:\n    start_timeout: 10\n",
            1,
        ),
    );
    let mut st = lab.win_state_json("win1");
    st["pod_sandbox_fails"] = serde_json::json!(["1.31.2"]);
    write(&lab.win_state("win1"), &st.to_string());
    let o = kwinctl(&["up", "-i", &lab.inv(), "--verify-pods", "--output", "json"]);
    assert!(
        text(&o).contains("is Ready at 1.31.2 but failed its pod check (--verify-pods)")
            && text(&o).contains("failed to setup network for sandbox"),
        "{}",
        text(&o)
    );
    rolled_back(&lab, &o);
    assert!(
        position(&log(&lab), "ready win1 v1.31.2") < log(&lab).len(),
        "the node was Ready at the new release before its pod check"
    );
    assert_eq!(marked(&lab, "win1"), Some("1.31.2".into()));
    // fixed: the rerun upgrades it again, its pod passes, it is uncordoned
    let mut st = lab.win_state_json("win1");
    st["pod_sandbox_fails"] = serde_json::json!([]);
    write(&lab.win_state("win1"), &st.to_string());
    let o = kwinctl(&["up", "-i", &lab.inv(), "--verify-pods", "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(kubelet_on(&lab, "win1"), "Kubernetes v1.31.2");
    assert_eq!(
        node_json(&lab, "win1")["spec"]["unschedulable"],
        serde_json::Value::Null
    );
    assert_eq!(marked(&lab, "win1"), None);
    // no test pod is left behind
    let pods = kubectl(&lab, "get pods -n default -l kwinctl.io/pod-check -o json");
    let pods: serde_json::Value = serde_json::from_slice(&pods.stdout).expect("pods JSON");
    assert_eq!(pods["items"].as_array().map(Vec::len), Some(0), "{pods}");
}
