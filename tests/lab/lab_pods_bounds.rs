//! `verify --pods` is bounded and stops on a signal (issue 38, P6; the
//! reliability probe's reproduction, with a hanging `kubectl exec`): on a
//! control plane whose kubectl lists the nodes and starts the test pods but
//! whose `kubectl exec` never answers, `verify --pods --timeout 20` ends in
//! about `--timeout` (not 30 s a check, one after another), exits 1 and
//! names the call that timed out; SIGTERM in the middle of the checks ends
//! it at once with 143, and the test pods are deleted either way.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common;

use common::lab::{Lab, require_root};
use common::{kwinctl, text};

/// A kubectl for `lab`'s h1 that answers `get nodes` with h1 and h2,
/// starts whatever pods it is given at once (each with the 2nd address of
/// its node's block), hangs on `exec`, and logs every call (kubectl.log
/// beside it).
fn hanging_kubectl(lab: &Lab) {
    let node = |h: &str| {
        format!(
            r#"{{"metadata":{{"name":"{h}","labels":{{"kubernetes.io/os":"linux"}}}},"status":{{"addresses":[{{"type":"InternalIP","address":"{}"}}]}}}}"#,
            lab.ip(h)
        )
    };
    let ip = |h: &str| std::net::Ipv4Addr::from(u32::from(lab.pod_cidr(h).network()) + 2);
    let script = format!(
        r#"#!/bin/sh
d=$(dirname "$0")
echo "$*" >> "$d/kubectl.log"
case "$1 $2" in
  "get nodes") printf '%s' '{{"items":[{n1},{n2}]}}' ;;
  "apply -f") cat > "$d/manifest.json" ;;
  "get pods")
    printf '{{"items":['
    sep=
    for n in $(grep -o '"name":"kwinctl-[^"]*"' "$d/manifest.json" | cut -d'"' -f4); do
      case "$n" in *-h1) ip={ip1} ;; *) ip={ip2} ;; esac
      printf '%s{{"metadata":{{"name":"%s"}},"status":{{"phase":"Running","podIP":"%s"}}}}' "$sep" "$n" "$ip"
      sep=,
    done
    printf ']}}' ;;
  exec*) exec sleep 40 ;;
esac
"#,
        n1 = node("h1"),
        n2 = node("h2"),
        ip1 = ip("h1"),
        ip2 = ip("h2"),
    );
    lab.fake_command("h1", "kubectl", &script);
}

fn log(lab: &Lab) -> String {
    std::fs::read_to_string(lab.dir().join("hosts/h1/usr-local-bin/kubectl.log"))
        .unwrap_or_default()
}

#[test]
fn verify_pods_with_a_hanging_kubectl_exec_ends_within_its_budget_and_on_sigterm() {
    if !require_root() {
        return;
    }
    let lab = Lab::up(2);
    let o = kwinctl(&["up", "-i", &lab.inv()]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    hanging_kubectl(&lab);

    // bounded: the 4 checks run at once, each under --timeout
    let start = Instant::now();
    let o = kwinctl(&[
        "verify",
        "-i",
        &lab.inv(),
        "--pods",
        "--timeout",
        "20",
        "--output",
        "json",
    ]);
    let took = start.elapsed();
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(took < Duration::from_secs(45), "{took:?}: {}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    let pods: Vec<serde_json::Value> = out
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter(|e| e["event"] == "pods")
        .collect();
    assert_eq!(pods.len(), 2, "{}", text(&o));
    for p in &pods {
        let checks = p["result"]["checks"].as_array().unwrap();
        let timed_out: Vec<&serde_json::Value> = checks
            .iter()
            .filter(|c| {
                c["detail"]
                    .as_str()
                    .is_some_and(|d| d.contains("kubectl exec did not finish within --timeout 20s"))
            })
            .collect();
        // the connect to the other pod and a Linux pod's two lookups
        // (to h2, dns, dns-search)
        assert_eq!(timed_out.len(), 3, "{p}");
        assert_eq!(p["result"]["ok"], false, "{p}");
    }
    let l = log(&lab);
    assert_eq!(l.matches("delete pods").count(), 1, "{l}");

    // SIGTERM while the checks hang: 143 at once, the pods deleted
    std::fs::remove_file(lab.dir().join("hosts/h1/usr-local-bin/kubectl.log")).unwrap();
    let mut child = Command::new(common::bin())
        .args(["verify", "-i", &lab.inv(), "--pods", "--timeout", "20"])
        .env("KWINCTL_SSH_CONFIG", "none")
        .env_remove("SSH_AUTH_SOCK")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = Instant::now();
    while !log(&lab).contains("exec") {
        if start.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("no kubectl exec: {}", log(&lab));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(300));
    let st = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let sent = Instant::now();
    let code = loop {
        if let Some(st) = child.try_wait().unwrap() {
            break st.code();
        }
        if sent.elapsed() > Duration::from_secs(30) {
            let _ = child.kill();
            panic!("kwinctl did not stop on SIGTERM");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(code, Some(143));
    assert!(
        sent.elapsed() < Duration::from_secs(5),
        "{:?}",
        sent.elapsed()
    );
    let l = log(&lab);
    assert_eq!(l.matches("delete pods").count(), 1, "{l}");
}
