//! Who a Windows node is to the cluster, on the lab: the name its kubelet
//! registers as (issue 39, item 6; docs/windows.md, Node names), as the
//! control plane's kubectl (the lab's stand-in) lists it.

use crate::common;

use common::lab::{Lab, require_root};
use common::{host, host_check, kwinctl, summary, text};

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

/// The kubelet of `win` restarted with TLS bootstrapping's flags
/// (docs/research/bootstrap.md#bt-kubelet): the bootstrap kubeconfig
/// `bootstrap` placed, its shared kubeconfig swapped for its own. What the
/// restart printed (the script's stdout).
fn restart_bootstrapping(lab: &Lab, win: &str, bootstrap: Option<&str>) -> String {
    let mut st = lab.win_state_json(win);
    if let Some(b) = bootstrap {
        st["placed_text"][r"C:\k\bootstrap-kubelet.conf"] =
            serde_json::json!({"sha256": "-", "text": b});
    }
    let binpath = st["services"]["kubelet"]["binpath"]
        .as_str()
        .unwrap()
        .replace(
            r"--kubeconfig=C:\k\config",
            r"--bootstrap-kubeconfig=C:\k\bootstrap-kubelet.conf --kubeconfig=C:\k\kubelet.conf --cert-dir=C:\k\pki",
        );
    assert!(binpath.contains("--bootstrap-kubeconfig"), "{binpath}");
    st["services"]["kubelet"]["binpath"] = binpath.into();
    common::write(&lab.win_state(win), &st.to_string());
    let addr = lab.ip(win);
    let script = format!(
        "# kwinctl-sim: {{\"kind\":\"prelude\",\"address\":\"{addr}\",\"adapter\":null}}\n\
         # kwinctl-sim: {{\"kind\":\"restart_service\",\"id\":0,\"name\":\"kubelet\"}}\n"
    );
    lab.run_windows(win, &script).expect("run").stdout
}

/// The control plane's view of the nodes: name -> Ready.
fn ready(lab: &Lab) -> std::collections::BTreeMap<String, bool> {
    let o = lab.exec("h1", "kubectl get nodes -o json");
    assert!(o.status.success(), "{}", text(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    v["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            let ok = n["status"]["conditions"][0]["status"] == "True";
            (n["metadata"]["name"].as_str().unwrap().to_string(), ok)
        })
        .collect()
}

/// Issue 35, slice a: winsim's kubelet bootstraps against the lab's
/// control plane as a real one would (docs/research/bootstrap.md): a
/// token from `kubeadm token create` gets node win1 a certificate of its
/// own; a node holding win1's certificate may not act as win2, and
/// `verify` names it; an expired token is Unauthorized.
#[test]
fn the_lab_kubelet_joins_with_a_token_and_only_as_itself() {
    if !require_root() {
        return;
    }
    let lab = Lab::up_l2bridge(
        1,
        &["2022", "2022"],
        Some("Installed"),
        K8S,
        CONTAINERD,
        None,
    );
    lab.install_kubectl("h1", DNS_IP, DOMAIN);
    let o = kwinctl(&["up", "-i", &lab.inv(), "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));

    // what `kubeadm join` takes: a token, and the CA from cluster-info
    let o = lab.exec("h1", "kubeadm token create --ttl 10m");
    assert!(o.status.success(), "{}", text(&o));
    let token = String::from_utf8_lossy(&o.stdout).trim().to_string();
    let o = lab.exec(
        "h1",
        "kubectl get configmap cluster-info -n kube-public -o json",
    );
    assert!(o.status.success(), "{}", text(&o));
    let ci: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let info: serde_json::Value =
        serde_json::from_str(ci["data"]["kubeconfig"].as_str().unwrap()).unwrap();
    let cluster = &info["clusters"][0]["cluster"];
    let bootstrap = |token: &str| {
        serde_json::json!({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "lab", "cluster": cluster}],
            "users": [{"name": "tls-bootstrap", "user": {"token": token}}],
            "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": "tls-bootstrap"}}],
            "current-context": "lab"})
        .to_string()
    };

    // win1 joins: one CSR, approved for the bootstrap user, and its node Ready
    let out = restart_bootstrapping(&lab, "win1", Some(&bootstrap(&token)));
    assert!(out.contains("KWX 0 ok"), "{out}");
    let o = lab.exec("h1", "kubectl get csr -o json");
    let csrs: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let items = csrs["items"].as_array().unwrap();
    assert_eq!(items.len(), 1, "{csrs}");
    assert_eq!(
        items[0]["spec"]["username"],
        format!("system:bootstrap:{}", &token[..6])
    );
    assert_eq!(
        items[0]["status"]["conditions"][0]["reason"],
        "AutoApproved"
    );
    let files = &lab.win_state_json("win1")["kubelet_files"];
    assert!(
        files[r"C:\k\pki\kubelet-client-current.pem"].is_string(),
        "{files}"
    );
    assert_eq!(ready(&lab).get("win1"), Some(&true), "{:?}", ready(&lab));

    // win2 holding win1's certificate: its Node writes are refused
    let mut st = lab.win_state_json("win2");
    st["kubelet_files"] = files.clone();
    common::write(&lab.win_state("win2"), &st.to_string());
    let out = restart_bootstrapping(&lab, "win2", None);
    assert!(out.contains("KWX 0 ok"), "{out}");
    assert_eq!(ready(&lab).get("win2"), Some(&false), "{:?}", ready(&lab));

    // verify reads each node's certificate: win1's is its own, win2 holds
    // win1's and fails naming itself and whom it acts as (issue 35, item 5)
    let o = kwinctl(&["verify", "-i", &lab.inv(), "--output", "json"]);
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
    let s = summary(&o);
    let cert_check = |h: &str| host_check(&s, h, "kubelet client certificate");
    assert_eq!(cert_check("win1")["pass"], true, "{s}");
    let c = cert_check("win2");
    assert_eq!(c["pass"], false, "{c}");
    let detail = c["detail"].as_str().unwrap();
    assert!(
        detail.starts_with("win2: ") && detail.contains("system:node:win1, not system:node:win2"),
        "{detail}"
    );

    // the token deleted, as kwinctl does after a run: a node without a
    // certificate cannot join with it (401 on the CSR's POST)
    let o = lab.exec("h1", &format!("kubeadm token delete {}", &token[..6]));
    assert!(o.status.success(), "{}", text(&o));
    let mut st = lab.win_state_json("win2");
    st["kubelet_files"] = serde_json::json!({});
    common::write(&lab.win_state("win2"), &st.to_string());
    let out = restart_bootstrapping(&lab, "win2", Some(&bootstrap(&token)));
    assert!(out.contains("KWX 0 failed"), "{out}");
    // (the kubelet's last words are in the file kube-log-runner writes)
    let log = lab.win_state_json("win2")["logs"][r"C:\k\logs\kubelet.log"].to_string();
    assert!(
        log.contains("cannot create certificate signing request: Unauthorized"),
        "{log}"
    );
    let o = lab.exec("h1", "kubectl get secrets -n kube-system -o json");
    let s: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(s["items"], serde_json::json!([]), "{s}");
}
