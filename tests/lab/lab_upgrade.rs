//! A binary change on running l2bridge nodes (issue 39, item 3): a
//! containerd bump stops containerd for the swap, and the service manager
//! stops what depends on it (kubelet, and kube-proxy through it); `up`
//! starts them all again. A rolling `up --parallel 1` stops at its first
//! failed host.

use crate::common;

use common::lab::{Lab, require_root};
use common::{host, kwinctl, summary, text, write};

const K8S: &str = "1.30.4";
const OLD: &str = "1.7.20";
/// The lab's other containerd release (lab/lab.sh serves both).
const NEW: &str = "1.7.28";

/// The inventory with containerd `NEW` (its release and archive) in place of
/// `OLD`, the archive's SHA-256 replaced by `sha` when given.
fn bumped(lab: &Lab, sha: Option<&str>) -> String {
    let inv = std::fs::read_to_string(lab.inventory()).unwrap();
    let (old_url, old_sha) = lab.download(&format!("containerd-{OLD}-windows-amd64.tar.gz"));
    let (new_url, new_sha) = lab.download(&format!("containerd-{NEW}-windows-amd64.tar.gz"));
    let line = format!("containerd: {{ url: \"{old_url}\", sha256: {old_sha} }}");
    assert!(inv.contains(&line), "{inv}");
    let out = inv
        .replace(
            &format!("containerd_version: \"{OLD}\""),
            &format!("containerd_version: \"{NEW}\""),
        )
        .replace(
            &line,
            &format!(
                "containerd: {{ url: \"{new_url}\", sha256: {} }}",
                sha.unwrap_or(&new_sha)
            ),
        );
    assert!(
        out.contains(&format!("containerd_version: \"{NEW}\"")),
        "{out}"
    );
    out
}

fn status(lab: &Lab, h: &str, svc: &str) -> String {
    lab.win_state_json(h)["services"][svc]["status"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn a_containerd_bump_restarts_kubelet_and_kube_proxy() {
    if !require_root() {
        return;
    }
    let lab = Lab::up_l2bridge(1, &["2022", "2022"], Some("Installed"), K8S, OLD, None);
    let i = lab.inv();
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));

    write(lab.inventory(), &bumped(&lab, None));
    // the plan says what the swap restarts
    let o = kwinctl(&["plan", "-i", &i]);
    assert!(
        text(&o).contains("(a running containerd restarts, and kubelet and kube-proxy with it)"),
        "{}",
        text(&o)
    );
    // and calls it an upgrade (issue 36)
    assert!(
        text(&o).contains("upgrade containerd 1.7.20 → 1.7.28 (cordon, drain, restart)"),
        "{}",
        text(&o)
    );
    let o = kwinctl(&["up", "-i", &i, "--parallel", "1", "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let s = summary(&o);
    for h in ["win1", "win2"] {
        assert_eq!(host(&s, h)["status"], "changed", "{h}: {}", text(&o));
        for svc in ["containerd", "kubelet", "kube-proxy"] {
            assert_eq!(status(&lab, h, svc), "Running", "{h} {svc}");
        }
    }
    // and the next run has nothing to do
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(summary(&o)["changed"], 0, "{}", text(&o));
}

#[test]
fn a_rolling_up_stops_at_its_first_failed_host() {
    if !require_root() {
        return;
    }
    let lab = Lab::up_l2bridge(1, &["2022", "2022"], Some("Installed"), K8S, OLD, None);
    let i = lab.inv();
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));

    // an archive whose checksum does not match: the first Windows host fails
    write(lab.inventory(), &bumped(&lab, Some(&"ab".repeat(32))));
    let o = kwinctl(&["up", "-i", &i, "--parallel", "1", "--output", "json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let s = summary(&o);
    assert_eq!(host(&s, "win1")["status"], "failed", "{}", text(&o));
    assert_eq!(host(&s, "win2")["status"], "interrupted", "{}", text(&o));
    assert!(
        text(&o).contains("--parallel 1 stops at the first failed host"),
        "{}",
        text(&o)
    );
    // win2 was left as it was: still running the old release
    for svc in ["containerd", "kubelet", "kube-proxy"] {
        assert_eq!(status(&lab, "win2", svc), "Running", "win2 {svc}");
    }
    // --max-fail lets a rolling run go on
    let o = kwinctl(&[
        "up",
        "-i",
        &i,
        "--parallel",
        "1",
        "--max-fail",
        "2",
        "--output",
        "json",
    ]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert_eq!(
        summary(&o)["failed_hosts"],
        serde_json::json!(["win1", "win2"]),
        "{}",
        text(&o)
    );
}
