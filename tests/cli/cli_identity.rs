//! Who a Windows node is to the cluster, without hosts: the name its
//! kubelet and kube-proxy register as (issue 39, item 6;
//! docs/windows.md, Node names).

use crate::common;

use common::{kwinctl, text, write};

const SEED: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/inventories/seed-1.5-transparent.yaml"
);

/// The seed inventory (Win01 at 10.0.0.11) and its kubeconfig in a folder
/// of their own, with `edit` applied to the inventory's text.
fn seed(edit: impl Fn(String) -> String) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    let inv = dir.path().join("example.yaml");
    write(&inv, &edit(std::fs::read_to_string(SEED).unwrap()));
    std::fs::copy(
        SEED.replace("seed-1.5-transparent.yaml", "example.kubeconfig"),
        dir.path().join("example.kubeconfig"),
    )
    .unwrap();
    (dir, inv.to_str().unwrap().to_string())
}

/// The `--hostname-override` values in Win01's rendered script.
fn overrides(inv: &str) -> Vec<String> {
    let o = kwinctl(&["render", "-i", inv, "--host", "Win01"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let out = String::from_utf8_lossy(&o.stdout);
    let mut v: Vec<String> = out
        .lines()
        .filter(|l| l.starts_with("$binPath = "))
        .flat_map(|l| l.split(' '))
        .filter_map(|w| w.strip_prefix("--hostname-override="))
        .map(|w| w.trim_end_matches('\'').to_string())
        .collect();
    v.dedup();
    v
}

#[test]
fn a_windows_node_is_named_by_its_host_name_in_lower_case() {
    let (_d, inv) = seed(|s| s);
    assert_eq!(
        overrides(&inv),
        ["win01"],
        "kubelet and kube-proxy, by name"
    );
}

#[test]
fn node_name_names_the_node_per_host() {
    let (_d, inv) = seed(|s| {
        s.replace(
            "    address: 10.0.0.11\n",
            "    address: 10.0.0.11\n    node_name: win-01.lab\n",
        )
    });
    assert_eq!(overrides(&inv), ["win-01.lab"]);
    let (_d, bad) = seed(|s| {
        s.replace(
            "    address: 10.0.0.11\n",
            "    address: 10.0.0.11\n    node_name: Win_01\n",
        )
    });
    let o = kwinctl(&["check", "-i", &bad]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o));
    assert!(
        text(&o).contains("node_name \"Win_01\" is not a Kubernetes node name"),
        "{}",
        text(&o)
    );
}

/// A node brought up by a kwinctl that named nodes by address (its state
/// file records the host, without a node name) keeps that name, also at a
/// new address; a node the state file recorded by name keeps that one.
#[test]
fn a_node_already_registered_keeps_its_name() {
    let (_d, inv) = seed(|s| s.replace("address: 10.0.0.11", "address: 10.0.0.21"));
    let state = inv.replace("example.yaml", "example.kwinctl-state.json");
    write(
        std::path::Path::new(&state),
        r#"{"version": 2, "cluster": "demo", "cluster_cidr": "192.168.0.0/16",
            "pod_cidrs": {"win01": "192.168.1.0/24"},
            "hosts": {"win01": {"os": "windows", "address": "10.0.0.11"}}}"#,
    );
    assert_eq!(overrides(&inv), ["10.0.0.11"]);
    write(
        std::path::Path::new(&state),
        r#"{"version": 2, "cluster": "demo", "cluster_cidr": "192.168.0.0/16",
            "pod_cidrs": {"win01": "192.168.1.0/24"},
            "hosts": {"win01": {"os": "windows", "address": "10.0.0.11", "node_name": "old-name"}}}"#,
    );
    assert_eq!(overrides(&inv), ["old-name"]);
}

/// `check` says whether the declared release can join a node with its own
/// identity and rotate it (issue 35 item 7), from the release table.
#[test]
fn check_says_which_releases_have_tls_bootstrapping() {
    let said = |version: &str| {
        let (_d, inv) = seed(|s| {
            s.replace(
                "kubernetes_version: \"1.10.13\"",
                &format!("kubernetes_version: \"{version}\""),
            )
        });
        let o = kwinctl(&["check", "-i", &inv]);
        assert_eq!(o.status.code(), Some(0), "{}", text(&o));
        String::from_utf8_lossy(&o.stdout)
            .lines()
            .find(|l| l.contains("TLS bootstrapping"))
            .unwrap_or_else(|| panic!("no TLS bootstrapping note: {}", text(&o)))
            .to_string()
    };
    let new = said("1.10.13");
    assert!(
        new.contains("1.10.13 has TLS bootstrapping")
            && new.contains("has client certificate rotation (1.8+)")
            && new.contains("docs/research/bootstrap.md#bt-releases"),
        "{new}"
    );
    let old = said("1.7.16");
    assert!(
        old.contains("1.7.16 lacks TLS bootstrapping")
            && old.contains("lacks client certificate rotation"),
        "{old}"
    );
}
