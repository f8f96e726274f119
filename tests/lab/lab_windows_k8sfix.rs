//! Issue #24 items 9 and 6 on the lab: a node dispute changes no Windows
//! node's firewall rules; kube-proxy runs without DSR on a simulated
//! Windows Server 2019 before KB4580390, and with it after the update.

use crate::common;

use common::lab::{Lab, require_root};
use common::{host, kwinctl, summary, text};

/// The remote addresses of win1's kwinctl rules, by rule name.
fn fw(lab: &Lab) -> Vec<(String, Vec<String>, String)> {
    let st = lab.win_state_json("win1");
    let mut out: Vec<(String, Vec<String>, String)> = st["firewall"]
        .as_object()
        .expect("firewall rules")
        .iter()
        .filter(|(n, _)| n.starts_with("kwinctl-"))
        .map(|(n, r)| {
            let remote = r["remote"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a.as_str().unwrap().to_string())
                .collect();
            (n.clone(), remote, r["description"].to_string())
        })
        .collect();
    out.sort();
    out
}

/// A worker recording the control plane's pod CIDR makes both disputed;
/// the Windows node keeps both addresses in its firewall rules (the API
/// server still reaches its kubelet) and its rules are not touched.
#[test]
fn a_dispute_leaves_the_windows_node_s_firewall_alone() {
    if !require_root() {
        return;
    }
    let lab = Lab::up_mixed(2, 1);
    let i = lab.inv();
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let before = fw(&lab);
    assert!(!before.is_empty());
    let (cp, worker) = (lab.ip("h1"), lab.ip("h2"));
    for (name, remote, _) in &before {
        assert!(
            remote.contains(&cp) && remote.contains(&worker),
            "{name}: {remote:?}"
        );
    }
    // h2 claims h1's block
    let cp_block = lab.pod_cidr("h1");
    let o = lab.exec(
        "h2",
        &format!("printf '%s\\n' {cp_block} > /etc/kwinctl/pod-cidr"),
    );
    assert!(o.status.success(), "{}", text(&o));
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
    let s = summary(&o);
    let failed = s["failed_hosts"].to_string();
    assert!(failed.contains("h1") && failed.contains("h2"), "{s}");
    let w = host(&s, "win1");
    let fw_action = w["actions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["key"] == "firewall")
        .unwrap_or_else(|| panic!("no firewall item: {w}"));
    assert_eq!(
        fw_action["action"], "firewall (unchanged)",
        "win1's firewall is not touched: {w}"
    );
    assert_eq!(fw(&lab), before, "win1's rules unchanged");
}

/// The state file of a simulated host with `key` set to `value`.
fn set_knob(lab: &Lab, h: &str, key: &str, value: serde_json::Value) {
    let mut st = lab.win_state_json(h);
    st[key] = value;
    std::fs::write(lab.win_state(h), serde_json::to_string(&st).unwrap()).unwrap();
}

fn kube_proxy(lab: &Lab) -> (String, String) {
    let st = lab.win_state_json("win1");
    let s = &st["services"]["kube-proxy"];
    (
        s["status"].as_str().unwrap_or_default().to_string(),
        s["binpath"].as_str().unwrap_or_default().to_string(),
    )
}

#[test]
fn kube_proxy_runs_without_dsr_before_kb4580390_and_with_it_after() {
    if !require_root() {
        return;
    }
    let lab = Lab::up_l2bridge(1, &["2019"], Some("Installed"), "1.30.4", "1.7.20", None);
    set_knob(&lab, "win1", "ubr", serde_json::json!(1432));
    let i = lab.inv();
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let w = host(&summary(&o), "win1").to_string();
    assert!(w.contains("10.0.17763.1432 predates KB4580390"), "{w}");
    let (status, binpath) = kube_proxy(&lab);
    assert_eq!(status, "Running", "{binpath}");
    assert!(!binpath.contains("--enable-dsr"), "{binpath}");
    // the update comes: the next up turns DSR on, kube-proxy still runs
    set_knob(&lab, "win1", "ubr", serde_json::json!(1554));
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert!(!text(&o).contains("predates KB4580390"), "{}", text(&o));
    let (status, binpath) = kube_proxy(&lab);
    assert_eq!(status, "Running", "{binpath}");
    assert!(binpath.contains("--enable-dsr=true"), "{binpath}");
}
