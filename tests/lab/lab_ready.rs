//! Readiness after the change (issue 39, item 4): a kubelet reports its
//! node Ready only a while after it starts (docs/research/kubernetes.md#k9;
//! the lab's kubectl stand-in with `--ready-after`). `up` waits for the
//! nodes it changed before judging them, and names one that is still
//! starting when the wait is over.

use crate::common;

use common::lab::{Lab, require_root};
use common::{host, host_check, kwinctl, kwinctl_env, summary, text, write};

const K8S: &str = "1.30.4";
const CONTAINERD: &str = "1.7.20";
const DNS_IP: &str = "198.18.240.10";
const DOMAIN: &str = "cluster.local";

/// The "kubernetes node Ready" check of `h` in a run's summary.
fn node_ready(o: &std::process::Output, h: &str) -> serde_json::Value {
    host_check(&summary(o), h, "kubernetes node Ready")
}

#[test]
fn up_waits_for_the_kubelet_it_started_and_names_one_still_starting() {
    if !require_root() {
        return;
    }
    let lab = Lab::up_l2bridge(1, &["2022"], Some("Installed"), K8S, CONTAINERD, None);
    let i = lab.inv();
    // the node turns Ready 4 s after its kubelet starts
    lab.install_kubectl_ready_after("h1", DNS_IP, DOMAIN, 4);

    // 1. the first `up` starts the kubelet and waits for its node
    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(host(&summary(&o), "win1")["status"], "changed");
    assert_eq!(node_ready(&o, "win1")["pass"], true, "{}", text(&o));
    let o = kwinctl(&["verify", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));

    // 2. the kubelet stopped (as a crash leaves it), and a node slower than
    // the wait: `up` starts it, waits 3 s, and says the node is still
    // starting rather than a bare "not Ready"
    let mut st = lab.win_state_json("win1");
    for svc in ["kubelet", "kube-proxy"] {
        st["services"][svc]["status"] = "Stopped".into();
    }
    write(&lab.win_state("win1"), &st.to_string());
    lab.install_kubectl_ready_after("h1", DNS_IP, DOMAIN, 600);
    let o = kwinctl_env(
        &["up", "-i", &i, "--output", "json"],
        &[("KWINCTL_READY_WAIT", "3")],
    );
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let c = node_ready(&o, "win1");
    let detail = c["detail"].as_str().unwrap();
    assert_eq!(c["pass"], false, "{c}");
    assert!(
        detail.contains("is still starting") && detail.contains("after this run changed it"),
        "{detail}"
    );
    assert!(text(&o).contains("start service kubelet"), "{}", text(&o));
    // `verify` changed nothing: the node is just not Ready
    let o = kwinctl(&["verify", "-i", &i, "--output", "json"]);
    assert_eq!(o.status.code(), Some(1), "{}", text(&o));
    let c = node_ready(&o, "win1");
    assert!(
        c["detail"].as_str().unwrap().ends_with("is not Ready"),
        "{c}"
    );
}
