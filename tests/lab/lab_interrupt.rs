//! An upgrade interrupted at each step (issue 36, item 5): SIGINT or
//! SIGKILL after the cordon (the stand-in's pause hook holds the drain
//! there), during a drain a PodDisruptionBudget holds back, and while the
//! new kubelet is not Ready yet (the stand-in reports it Ready only 600 s
//! after it started). The step is the stand-in's log's, never a sleep.
//! After each: no service is left stopped, the node stays cordoned with
//! kwinctl's mark, a SIGINT ends the remote drain and says where the run
//! stopped; then a rerun finishes the upgrade with each drain and each
//! replacement done once (the stand-in's log; the copy kept beside the
//! kubelet is still the old release's).

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common;

use common::lab::{Lab, require_root};
use common::{kwinctl, text, write};

use super::lab_rolling::{
    DNS_IP, DOMAIN, apply, binary_on, kubectl, log, marked, node_json, pod, upgraded_lab,
};
use super::lab_skew::kubelet_on;

#[derive(Clone, Copy, Debug, PartialEq)]
enum At {
    /// Cordoned, the drain held by the stand-in's hook before it evicts.
    Cordoned,
    /// The drain retrying an eviction a budget refuses.
    Draining,
    /// Drained, replaced, the new kubelet running but not Ready yet.
    WaitingReady,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Signal {
    Int,
    Kill,
}

fn count(l: &[String], line: &str) -> usize {
    l.iter().filter(|x| *x == line).count()
}

/// `up` started, stopped by `signal` once the stand-in's log shows `at`.
fn interrupted(lab: &Lab, at: At, signal: Signal) -> std::process::Output {
    let mut child: Child = Command::new(common::bin())
        .args(["up", "-i", &lab.inv(), "--output", "json"])
        .env("KWINCTL_SSH_CONFIG", "none")
        .env_remove("SSH_AUTH_SOCK")
        .env("KWINCTL_DRAIN_TIMEOUT", "300")
        .env("KWINCTL_READY_WAIT", "300")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let want = match at {
        At::Cordoned => "hold drain win1",
        At::Draining => "refuse default/web-1 win1",
        At::WaitingReady => "not-ready win1 v1.31.2",
    };
    let start = Instant::now();
    while !log(lab).iter().any(|x| x == want) {
        if start.elapsed() > Duration::from_secs(150) || child.try_wait().unwrap().is_some() {
            let _ = child.kill();
            let o = child.wait_with_output().unwrap();
            panic!(
                "{at:?}: no {want:?} in the stand-in's log:\n{}\n{}",
                log(lab).join("\n"),
                text(&o)
            );
        }
        std::thread::sleep(Duration::from_millis(200));
    }
    match signal {
        Signal::Int => {
            let st = Command::new("kill")
                .args(["-INT", &child.id().to_string()])
                .status()
                .unwrap();
            assert!(st.success());
        }
        Signal::Kill => child.kill().unwrap(),
    }
    let sent = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if sent.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            panic!("{at:?}: kwinctl did not stop within 30s of {signal:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    child.wait_with_output().unwrap()
}

fn case(at: At, signal: Signal) {
    let lab = upgraded_lab(&["2022"]);
    let mut items = vec![pod("web-1", "win1")];
    match at {
        At::Cordoned => write(&lab.dir().join("kubectl/hold-drain"), ""),
        At::Draining => items.push(serde_json::json!(
            {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
             "metadata": {"name": "web", "namespace": "default"},
             "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web-1"}}}})),
        At::WaitingReady => {
            lab.install_kubectl_server_ready_after("h1", DNS_IP, DOMAIN, "1.31.2", 600)
        }
    }
    apply(
        &lab,
        serde_json::json!({"apiVersion": "v1", "kind": "List", "items": items}),
    );
    let o = interrupted(&lab, at, signal);
    let ctx = format!("{at:?} {signal:?}");
    // no service left stopped, the node cordoned with kwinctl's mark
    let st = lab.win_state_json("win1");
    for svc in ["kubelet", "kube-proxy"] {
        assert_eq!(st["services"][svc]["status"], "Running", "{ctx}: {svc}");
    }
    assert_eq!(
        node_json(&lab, "win1")["spec"]["unschedulable"],
        true,
        "{ctx}"
    );
    assert_eq!(marked(&lab, "win1"), Some("1.31.2".into()), "{ctx}");
    let held = || {
        std::fs::read_dir(lab.dir().join("kubectl"))
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.to_string_lossy().contains("/held-drain."))
            .collect::<Vec<_>>()
    };
    if signal == Signal::Int {
        assert_eq!(o.status.code(), Some(130), "{ctx}: {}", text(&o));
        let said = match at {
            At::WaitingReady => "interrupted while waiting for node win1 to report Ready at 1.31.2",
            _ => "interrupted during the drain: the drain was ended; nothing was replaced",
        };
        assert!(text(&o).contains(said), "{ctx}: {}", text(&o));
        // the remote drain ended with the run: released from the hook (or
        // given the budget's next retry), it does nothing more
        let before = log(&lab).len();
        for f in held() {
            std::fs::remove_file(f).unwrap();
        }
        if at != At::WaitingReady {
            std::thread::sleep(Duration::from_secs(7));
            let l = log(&lab);
            assert_eq!(
                l.len(),
                before,
                "{ctx}: the drain went on:\n{}",
                l.join("\n")
            );
        }
    }
    // the rerun: the budget gone, nodes Ready as soon as their kubelet
    // runs; a killed run's lock broken. A drain held since the killed run
    // stays held: the rerun must end it, not wait for it
    if at == At::Draining {
        std::fs::remove_file(lab.dir().join("kubectl/pdbs/default/web.json")).unwrap();
    }
    lab.install_kubectl_server("h1", DNS_IP, DOMAIN, "1.31.2");
    if signal == Signal::Kill {
        let o = kwinctl(&["unlock", "-i", &lab.inv(), "--yes"]);
        assert_eq!(o.status.code(), Some(0), "{ctx}: {}", text(&o));
    }
    let o = kwinctl(&["up", "-i", &lab.inv(), "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{ctx}: {}", text(&o));
    for f in held() {
        std::fs::remove_file(f).unwrap();
    }
    std::thread::sleep(Duration::from_secs(1));
    let l = log(&lab);
    assert_eq!(kubelet_on(&lab, "win1"), "Kubernetes v1.31.2", "{ctx}");
    assert_eq!(
        binary_on(&lab, "win1", "kubelet.exe.previous"),
        "Kubernetes v1.30.4",
        "{ctx}: replaced twice"
    );
    let st = lab.win_state_json("win1");
    for svc in ["kubelet", "kube-proxy"] {
        assert_eq!(st["services"][svc]["status"], "Running", "{ctx}: {svc}");
    }
    assert_eq!(
        node_json(&lab, "win1")["spec"]["unschedulable"],
        serde_json::Value::Null,
        "{ctx}"
    );
    assert_eq!(marked(&lab, "win1"), None, "{ctx}");
    assert_eq!(count(&l, "drained win1"), 1, "{ctx}:\n{}", l.join("\n"));
    assert_eq!(
        count(&l, "evict default/web-1 win1"),
        1,
        "{ctx}:\n{}",
        l.join("\n")
    );
    let kubectl_pods = kubectl(&lab, "get pods -n default -o json");
    assert!(kubectl_pods.status.success(), "{ctx}");
}

#[test]
fn sigint_after_the_cordon_ends_the_drain_and_a_rerun_finishes() {
    if require_root() {
        case(At::Cordoned, Signal::Int);
    }
}

#[test]
fn sigkill_after_the_cordon_and_a_rerun_ends_the_old_drain_and_finishes() {
    if require_root() {
        case(At::Cordoned, Signal::Kill);
    }
}

#[test]
fn sigint_during_a_held_back_drain_ends_it_and_a_rerun_finishes() {
    if require_root() {
        case(At::Draining, Signal::Int);
    }
}

#[test]
fn sigint_while_waiting_for_ready_leaves_it_running_and_a_rerun_finishes() {
    if require_root() {
        case(At::WaitingReady, Signal::Int);
    }
}

#[test]
fn sigkill_while_waiting_for_ready_and_a_rerun_finishes() {
    if require_root() {
        case(At::WaitingReady, Signal::Kill);
    }
}
