//! Who a Windows node is to the cluster, on the lab: the name its kubelet
//! registers as (issue 39, item 6; docs/windows.md, Node names), as the
//! control plane's kubectl (the lab's stand-in) lists it.

use crate::common;

use common::lab::{Lab, require_root};
use common::{host, kwinctl, summary, text};

const K8S: &str = "1.30.4";
const CONTAINERD: &str = "1.7.20";
const DNS_IP: &str = "198.18.240.10";
const DOMAIN: &str = "cluster.local";

/// The control plane's nodes: (name, InternalIP).
fn nodes(lab: &Lab) -> Vec<(String, String)> {
    let o = lab.exec("h1", "kubectl get nodes -o json");
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    v["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            (
                n["metadata"]["name"].as_str().unwrap().to_string(),
                n["status"]["addresses"][0]["address"]
                    .as_str()
                    .unwrap()
                    .to_string(),
            )
        })
        .collect()
}

#[test]
fn a_windows_node_registers_by_host_name_or_node_name() {
    if !require_root() {
        return;
    }
    let lab = Lab::up_l2bridge(1, &["2022"], Some("Installed"), K8S, CONTAINERD, None);
    lab.install_kubectl("h1", DNS_IP, DOMAIN);
    let i = lab.inv();
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let win1 = (String::from("win1"), lab.ip("win1"));
    assert!(nodes(&lab).contains(&win1), "{:?}", nodes(&lab));

    // node_name: the kubelet and kube-proxy restart under the new name,
    // and verify finds the node by it
    let inv = std::fs::read_to_string(&i).unwrap().replace(
        &format!("address: {}\n", lab.ip("win1")),
        &format!("address: {}\n    node_name: w-one\n", lab.ip("win1")),
    );
    common::write(lab.inventory(), &inv);
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(host(&summary(&o), "win1")["status"], "changed");
    let names: Vec<String> = nodes(&lab).into_iter().map(|(n, _)| n).collect();
    assert!(names.contains(&"w-one".to_string()), "{names:?}");
    let o = kwinctl(&["verify", "-i", &i]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
}
