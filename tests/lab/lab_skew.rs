//! The version skew policy before anything changes (issue 36, item 2): a
//! kubelet newer than kube-apiserver (as the control plane's kubectl
//! reports it) is refused before any host changes; a downgrade needs
//! `--allow-downgrade` (docs/research/upgrade.md#u8).

use crate::common;

use common::lab::{Lab, require_root};
use common::{kwinctl, text, write};

const DNS_IP: &str = "198.18.240.10";
const DOMAIN: &str = "cluster.local";

fn sha256(b: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(b)
        .iter()
        .map(|x| format!("{x:02x}"))
        .collect()
}

/// A 1.24+ l2bridge lab of one Linux control plane and one Windows host at
/// `k8s`, serving `also`'s binaries too.
fn lab(k8s: &str, also: &str) -> Lab {
    Lab::up_windows_builds_env(
        1,
        &["2022"],
        Some("Installed"),
        &[
            ("KWINCTL_LAB_K8S", k8s),
            ("KWINCTL_LAB_CONTAINERD", "1.7.20"),
            ("KWINCTL_LAB_K8S_ALSO", also),
        ],
    )
}

/// The inventory with release `to` (its version and its binaries) in
/// place of `from`.
pub fn declare(lab: &Lab, from: &str, to: &str) -> String {
    let mut inv = std::fs::read_to_string(lab.inventory()).unwrap();
    let old = format!("kubernetes_version: \"{from}\"");
    assert!(inv.contains(&old), "{inv}");
    inv = inv.replace(&old, &format!("kubernetes_version: \"{to}\""));
    for b in ["kubelet", "kube-proxy"] {
        let sha =
            |v: &str| sha256(&std::fs::read(lab.dir().join(format!("dl/v{v}/{b}.exe"))).unwrap());
        let line = |v: &str| {
            format!(
                "{b}: {{ url: \"https://dl.lab.invalid/v{v}/{b}.exe\", sha256: {} }}",
                sha(v)
            )
        };
        assert!(inv.contains(&line(from)), "{inv}");
        inv = inv.replace(&line(from), &line(to));
    }
    inv
}

/// The release of the kubelet.exe on `h` (its `--version` line).
pub fn kubelet_on(lab: &Lab, h: &str) -> String {
    lab.win_state_json(h)["file_versions"][r"C:\k\kubelet.exe"]
        .as_str()
        .unwrap_or_default()
        .to_string()
}

#[test]
fn a_kubelet_newer_than_the_api_server_is_refused_before_any_change() {
    if !require_root() {
        return;
    }
    let lab = lab("1.30.4", "1.31.2");
    let i = lab.inv();
    // the API server runs the lab's release, 1.30.4
    lab.install_kubectl("h1", DNS_IP, DOMAIN);
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(kubelet_on(&lab, "win1"), "Kubernetes v1.30.4");

    write(lab.inventory(), &declare(&lab, "1.30.4", "1.31.2"));
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains(
            "kubernetes_version 1.31.2 against kube-apiserver 1.30.4: kubelet 1.31 would be newer than kube-apiserver 1.30"
        ),
        "{}",
        text(&o)
    );
    assert!(
        text(&o).contains("upgrade the control plane first"),
        "{}",
        text(&o)
    );
    // nothing changed on the node: the old kubelet runs
    assert_eq!(kubelet_on(&lab, "win1"), "Kubernetes v1.30.4");
    let st = lab.win_state_json("win1");
    for svc in ["kubelet", "kube-proxy", "containerd"] {
        assert_eq!(st["services"][svc]["status"], "Running", "{svc}");
    }
    // and a downgrade back is no downgrade: the inventory again says 1.30.4
    write(lab.inventory(), &declare(&lab, "1.31.2", "1.30.4"));
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}

#[test]
fn a_downgrade_needs_allow_downgrade() {
    if !require_root() {
        return;
    }
    let lab = lab("1.31.2", "1.30.4");
    let i = lab.inv();
    lab.install_kubectl("h1", DNS_IP, DOMAIN);
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));

    write(lab.inventory(), &declare(&lab, "1.31.2", "1.30.4"));
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    assert!(
        text(&o).contains("win1 runs kubelet 1.31.2 and the inventory declares kubernetes_version 1.30.4: that is a downgrade"),
        "{}",
        text(&o)
    );
    assert_eq!(kubelet_on(&lab, "win1"), "Kubernetes v1.31.2");
    let o = kwinctl(&["up", "-i", &i, "--allow-downgrade", "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(kubelet_on(&lab, "win1"), "Kubernetes v1.30.4");
}
