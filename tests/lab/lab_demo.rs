//! The lab's one writer of inventories (issue 34): `lab.sh up` writes, for
//! a release of the l2bridge profile given only as KWINCTL_LAB_K8S, an
//! inventory `check` accepts and `up` converges.

use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use crate::common;

use common::lab::{Lab, require_root};
use common::{kwinctl, summary, text};

const REPO: &str = env!("CARGO_MANIFEST_DIR");

/// `lab.sh up` with Kubernetes 1.30 (l2bridge) named only by KWINCTL_LAB_K8S:
/// the inventory has everything the profile needs, `check` accepts it, `up
/// --reboot` converges (the Containers feature's restart), `up` again
/// changes nothing and `verify` passes. And a --profile that does not fit
/// the release is refused before anything is made.
#[test]
fn lab_sh_writes_a_complete_inventory_for_an_l2bridge_release() {
    if !require_root() {
        return;
    }
    let lab = Lab::up_release(1, 1, "1.30.4");
    let i = lab.inv();
    let inv = std::fs::read_to_string(lab.inventory()).unwrap();
    for key in [
        "containerd_version:",
        "kube-log-runner:",
        "containerd:",
        "cni-plugins:",
    ] {
        assert!(inv.contains(key), "{key}:\n{inv}");
    }
    assert_eq!(lab.win_state_json("win1")["build"], "10.0.20348");
    let o = kwinctl(&["check", "-i", &i, "--strict"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = kwinctl(&["up", "-i", &i, "--reboot", "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(summary(&o)["changed"], 0, "{}", text(&o));
    let o = kwinctl(&["verify", "-i", &i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));

    let dir = tempfile::tempdir().unwrap();
    let o = lab_up(dir.path(), &[("KWINCTL_LAB_K8S", "1.30.4")], "transparent");
    assert!(!o.status.success(), "{}", text(&o));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("runs the l2bridge profile"), "{err}");
    assert!(!dir.path().join("lab.env").exists());
}

/// `lab.sh up DIR --linux 1 --windows 1 --profile P` with `env`.
fn lab_up(dir: &Path, env: &[(&str, &str)], profile: &str) -> Output {
    let mut cmd = Command::new("bash");
    cmd.arg(format!("{REPO}/lab/lab.sh"))
        .arg("up")
        .arg(dir)
        .args(["--linux", "1", "--windows", "1", "--profile", profile])
        .env("KWINCTL_LAB_OWNER", std::process::id().to_string());
    for (k, v) in env {
        cmd.env(k, v);
    }
    common::run_bounded(cmd, Duration::from_secs(60))
}
