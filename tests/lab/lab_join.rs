//! Issue 35 end to end on the lab: each Windows node joins with an identity
//! of its own (a bootstrap token from the control plane's kubeadm, the
//! kubelet's TLS bootstrap against the lab's API server model), no token
//! outlives the run, a node already joined is left alone, a node holding
//! another cluster's certificate joins again, and a changed cluster CA is
//! refused; kube-proxy has a ServiceAccount token of its own per node, and
//! a control plane without kubeadm joins nodes too
//! (docs/research/bootstrap.md).

use crate::common;

use common::lab::{Lab, require_root};
use common::{host, host_check, kwinctl, summary, text};

const K8S: &str = "1.30.4";
const CONTAINERD: &str = "1.7.20";
const DNS_IP: &str = "198.18.240.10";
const DOMAIN: &str = "cluster.local";
const CURRENT: &str = r"C:\k\pki\kubelet-client-current.pem";

/// A lab whose inventory asks for `identity: bootstrap` (no kubeconfig),
/// with the kubectl and kubeadm stand-ins on the control plane h1.
fn bootstrap_lab() -> Lab {
    let lab = Lab::up_windows_builds_env(
        1,
        &["2022", "2022"],
        Some("Installed"),
        &[
            ("KWINCTL_LAB_K8S", K8S),
            ("KWINCTL_LAB_CONTAINERD", CONTAINERD),
            ("KWINCTL_LAB_IDENTITY", "bootstrap"),
        ],
    );
    lab.install_kubectl("h1", DNS_IP, DOMAIN);
    lab
}

/// The tokens the stand-in's kubeadm made so far (its record: id and
/// description, never the secret).
fn created(lab: &Lab) -> Vec<serde_json::Value> {
    let p = lab.dir().join("kubectl/apiserver/created.jsonl");
    std::fs::read_to_string(p)
        .unwrap_or_default()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The tokens left on the control plane (`kubeadm token list`).
fn left(lab: &Lab) -> String {
    let o = lab.exec("h1", "kubeadm token list -o json");
    assert!(o.status.success(), "{}", text(&o));
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

/// The subject of the certificate `win`'s kubelet holds (openssl reads the
/// CERTIFICATE block of the file; the key beside it is not looked at).
fn subject(lab: &Lab, win: &str) -> String {
    let pem = lab.win_state_json(win)["kubelet_files"][CURRENT]
        .as_str()
        .unwrap_or_else(|| panic!("{win} has no {CURRENT}"))
        .to_string();
    let cert = &pem[..pem.find("-----END CERTIFICATE-----").unwrap() + 25];
    let mut child = std::process::Command::new("openssl")
        .args(["x509", "-noout", "-subject", "-nameopt", "RFC2253"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("openssl");
    use std::io::Write;
    child
        .stdin
        .take()
        .unwrap()
        .write_all(cert.as_bytes())
        .unwrap();
    let o = child.wait_with_output().unwrap();
    String::from_utf8_lossy(&o.stdout).trim().to_string()
}

const PROXY_CONF: &str = r"C:\k\kube-proxy.conf";
const PROXY_USER: &str = "system:serviceaccount:kube-system:kube-proxy";

/// `win`'s kube-proxy names its own kubeconfig, holds it, and its last
/// start authenticated as kube-proxy's ServiceAccount, nothing refused.
fn proxy_is_itself(lab: &Lab, win: &str) {
    let st = lab.win_state_json(win);
    let binpath = st["services"]["kube-proxy"]["binpath"].as_str().unwrap();
    assert!(
        binpath.contains(&format!("--kubeconfig={PROXY_CONF}")),
        "{win}: {binpath}"
    );
    let placed = st["placed_text"].as_object().unwrap();
    assert!(
        placed.keys().any(|p| p.eq_ignore_ascii_case(PROXY_CONF)),
        "{win}: {:?}",
        placed.keys().collect::<Vec<_>>()
    );
    assert!(
        st["kube_proxy_refused"].is_null(),
        "{win}: {}",
        st["kube_proxy_refused"]
    );
    assert_eq!(st["kube_proxy_user"], PROXY_USER, "{win}");
}

/// `kubectl get secret NAME -n kube-system` on the control plane: found?
fn secret_exists(lab: &Lab, name: &str) -> bool {
    let o = lab.exec(
        "h1",
        &format!("kubectl get secret {name} -n kube-system -o json"),
    );
    if o.status.success() {
        return true;
    }
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("NotFound"), "{name}: {}", text(&o));
    false
}

fn cert_check(s: &serde_json::Value, h: &str) -> serde_json::Value {
    host_check(s, h, "kubelet client certificate")
}

/// `kwinctl ARGS`, which must succeed.
fn succeeds(args: &[&str]) -> std::process::Output {
    let o = kwinctl(args);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    o
}

/// The node's kubelet holds a client certificate in its own name.
fn holds_its_own(lab: &Lab, win: &str) {
    assert_eq!(
        subject(lab, win),
        format!("subject=CN=system:node:{win},O=system:nodes")
    );
}

#[test]
fn each_windows_node_joins_with_its_own_certificate_and_no_token_is_left() {
    if !require_root() {
        return;
    }
    let lab = bootstrap_lab();
    let i = lab.inv();
    let inv = std::fs::read_to_string(&i).unwrap();
    assert!(!inv.contains("kubeconfig"), "{inv}");
    succeeds(&["check", "-i", &i]);
    // plan says which nodes up would join, and why
    let plan = |i: &str| summary(&succeeds(&["plan", "-i", i, "--output", "json"]));
    let joins = |s: &serde_json::Value, win: &str| {
        host(s, win)["notes"]
            .to_string()
            .contains("up would join this node to the cluster")
    };
    let s = plan(&i);
    assert!(joins(&s, "win1") && joins(&s, "win2"), "{s}");
    assert!(
        host(&s, "win1")["notes"]
            .to_string()
            .contains("no client certificate"),
        "{s}"
    );

    succeeds(&["up", "-i", &i, "--output", "json"]);
    // the token never shows, and none is left
    let token_ids: Vec<String> = created(&lab)
        .iter()
        .map(|t| t["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(
        token_ids.len(),
        1,
        "one token for the run: {:?}",
        created(&lab)
    );
    assert!(
        created(&lab)[0]["description"]
            .as_str()
            .unwrap()
            .contains("kwinctl")
    );
    assert_eq!(left(&lab), "", "no token is left on the control plane");
    for win in ["win1", "win2"] {
        holds_its_own(&lab, win);
        let st = lab.win_state_json(win);
        let placed = st["placed_text"].to_string().to_ascii_lowercase();
        assert!(
            !placed.contains("bootstrap-kubelet.conf"),
            "{win}: {placed}"
        );
        let kubelet = st["services"]["kubelet"]["binpath"].as_str().unwrap();
        assert!(
            kubelet.contains(r"--bootstrap-kubeconfig=C:\k\bootstrap-kubelet.conf")
                && kubelet.contains(r"--kubeconfig=C:\k\kubelet.conf")
                && kubelet.contains(r"--cert-dir=C:\k\pki")
                && kubelet.contains("--rotate-certificates"),
            "{kubelet}"
        );
    }
    let state = std::fs::read_to_string(lab.dir().join("inventory.kwinctl-state.json")).unwrap();
    assert!(state.contains("\"ca_pin\""), "{state}");
    for win in ["win1", "win2"] {
        proxy_is_itself(&lab, win);
    }

    // verify: each node is itself
    let o = succeeds(&["verify", "-i", &i, "--output", "json"]);
    let s = summary(&o);
    for win in ["win1", "win2"] {
        assert_eq!(cert_check(&s, win)["pass"], true, "{s}");
    }

    // a rerun with every certificate valid makes no token
    succeeds(&["up", "-i", &i, "--output", "json"]);
    assert_eq!(created(&lab).len(), 1, "{:?}", created(&lab));

    // a node whose certificate was deleted joins again, alone
    let mut st = lab.win_state_json("win2");
    st["kubelet_files"]
        .as_object_mut()
        .unwrap()
        .retain(|p, _| !p.eq_ignore_ascii_case(CURRENT));
    common::write(&lab.win_state("win2"), &st.to_string());
    let s = plan(&i);
    assert!(!joins(&s, "win1") && joins(&s, "win2"), "{s}");
    let o = succeeds(&["up", "-i", &i, "--output", "json"]);
    let s = summary(&o);
    assert_eq!(host(&s, "win1")["status"], "ok", "{s}");
    assert_eq!(host(&s, "win2")["status"], "changed", "{s}");
    assert_eq!(created(&lab).len(), 2, "{:?}", created(&lab));
    assert_eq!(left(&lab), "");
    holds_its_own(&lab, "win2");
    // the tokens' secrets are in no output and no run record: wherever a
    // token's id appears, no 16-character secret follows it
    let mut texts = vec![text(&o)];
    let runs = lab.dir().join("inventory.kwinctl-runs");
    for run in std::fs::read_dir(&runs).unwrap() {
        for f in std::fs::read_dir(run.unwrap().path()).unwrap() {
            texts.push(
                String::from_utf8_lossy(&std::fs::read(f.unwrap().path()).unwrap()).into_owned(),
            );
        }
    }
    let ids: Vec<String> = created(&lab)
        .iter()
        .map(|t| t["id"].as_str().unwrap().to_string())
        .collect();
    for t in &texts {
        for id in &ids {
            for (at, _) in t.match_indices(&format!("{id}.")) {
                let next: String = t[at + 7..].chars().take(16).collect();
                assert!(
                    !(next.len() == 16
                        && next
                            .bytes()
                            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())),
                    "token {id}'s secret shown: {}",
                    &t[at.saturating_sub(80)..(at + 40).min(t.len())]
                );
            }
        }
    }
}

#[test]
fn a_node_holding_another_nodes_certificate_fails_verify_and_joins_as_itself() {
    if !require_root() {
        return;
    }
    let lab = bootstrap_lab();
    let i = lab.inv();
    succeeds(&["up", "-i", &i, "--output", "json"]);

    // win2 holds win1's certificate and kubeconfig
    let files = lab.win_state_json("win1")["kubelet_files"].clone();
    let mut st = lab.win_state_json("win2");
    st["kubelet_files"] = files;
    common::write(&lab.win_state("win2"), &st.to_string());
    let o = kwinctl(&["verify", "-i", &i, "--output", "json"]);
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
    let s = summary(&o);
    assert_eq!(cert_check(&s, "win1")["pass"], true, "{s}");
    let c = cert_check(&s, "win2");
    assert_eq!(c["pass"], false, "{c}");
    let detail = c["detail"].as_str().unwrap();
    assert!(
        detail.starts_with("win2: ") && detail.contains("system:node:win1, not system:node:win2"),
        "{detail}"
    );

    // `up` joins it again as itself
    succeeds(&["up", "-i", &i, "--output", "json"]);
    holds_its_own(&lab, "win2");
    succeeds(&["verify", "-i", &i]);
}

#[test]
fn a_changed_cluster_ca_is_refused_until_accepted() {
    if !require_root() {
        return;
    }
    let lab = bootstrap_lab();
    let i = lab.inv();
    succeeds(&["up", "-i", &i, "--output", "json"]);
    let state = || std::fs::read_to_string(lab.dir().join("inventory.kwinctl-state.json")).unwrap();
    let pinned: serde_json::Value = serde_json::from_str(&state()).unwrap();
    let old = pinned["ca_pin"]["hash"].as_str().unwrap().to_string();

    // the control plane gets another CA (the model makes a new one when its
    // files are gone), and win1 must join again
    let api = lab.dir().join("kubectl/apiserver");
    std::fs::remove_file(api.join("ca.key")).unwrap();
    std::fs::remove_file(api.join("ca.crt")).unwrap();
    let mut st = lab.win_state_json("win1");
    st["kubelet_files"] = serde_json::json!({});
    common::write(&lab.win_state("win1"), &st.to_string());

    let o = kwinctl(&["up", "-i", &i, "--output", "json"]);
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
    let out = text(&o);
    assert!(
        out.contains("the cluster CA changed") && out.contains(&old),
        "{out}"
    );
    let new = out
        .split("--accept-ca ")
        .nth(1)
        .and_then(|r| r.get(..71))
        .unwrap_or_else(|| panic!("no --accept-ca in {out}"))
        .to_string();
    assert!(new.starts_with("sha256:") && new != old, "{new}");
    assert_eq!(
        created(&lab).len(),
        1,
        "no token for a refused CA: {:?}",
        created(&lab)
    );
    // nothing joined win1 to the unknown CA
    assert!(lab.win_state_json("win1")["kubelet_files"][CURRENT].is_null());

    succeeds(&["up", "-i", &i, "--output", "json", "--accept-ca", &new]);
    assert!(state().contains(&new), "{}", state());
    holds_its_own(&lab, "win1");
    assert_eq!(left(&lab), "");
    // an accepted rotation joins every node again: their certificates were
    // the old CA's, which the API server no longer takes
    assert_eq!(created(&lab).len(), 2, "{:?}", created(&lab));
    succeeds(&["verify", "-i", &i]);
}

#[test]
fn kube_proxy_has_its_own_token_per_node_and_a_control_plane_without_kubeadm_joins() {
    if !require_root() {
        return;
    }
    let lab = bootstrap_lab();
    let i = lab.inv();
    // no kubeadm on the control plane: the run's token is a Secret made
    // with kubectl (docs/research/bootstrap.md#bt-secret)
    let o = lab.exec("h1", "rm \"$(command -v kubeadm)\" && ! command -v kubeadm");
    assert!(o.status.success(), "{}", text(&o));

    let o = succeeds(&["up", "-i", &i, "--output", "json"]);
    let s = summary(&o);
    for win in ["win1", "win2"] {
        assert_eq!(host(&s, win)["status"], "changed", "{s}");
        holds_its_own(&lab, win);
        proxy_is_itself(&lab, win);
        assert!(secret_exists(&lab, &format!("kwinctl-kube-proxy-{win}")));
    }
    assert!(
        created(&lab).is_empty(),
        "kubeadm made no token: {:?}",
        created(&lab)
    );
    // no bootstrap-token Secret is left
    let secrets = lab.dir().join("kubectl/apiserver/secrets/kube-system");
    let names: Vec<String> = std::fs::read_dir(&secrets)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names.iter().all(|n| !n.starts_with("bootstrap-token-")),
        "{names:?}"
    );
    // kube-proxy's kubeconfig holds its token: no output, no run record
    // shows the kubeconfig
    let mut texts = vec![text(&o)];
    let runs = lab.dir().join("inventory.kwinctl-runs");
    for run in std::fs::read_dir(&runs).unwrap() {
        for f in std::fs::read_dir(run.unwrap().path()).unwrap() {
            texts.push(
                String::from_utf8_lossy(&std::fs::read(f.unwrap().path()).unwrap()).into_owned(),
            );
        }
    }
    for t in &texts {
        assert!(!t.contains("lab-sa."), "kube-proxy's token shown");
    }

    // a rerun with the same Secrets changes nothing
    let o = succeeds(&["up", "-i", &i, "--output", "json"]);
    let s = summary(&o);
    for win in ["win1", "win2"] {
        assert_eq!(host(&s, win)["status"], "ok", "{s}");
    }

    // reset of win1 revokes its kube-proxy's token, not win2's
    succeeds(&["reset", "-i", &i, "--limit", "win1", "--yes"]);
    assert!(!secret_exists(&lab, "kwinctl-kube-proxy-win1"));
    assert!(secret_exists(&lab, "kwinctl-kube-proxy-win2"));
    let placed = lab.win_state_json("win1")["placed_text"].clone();
    assert!(
        placed
            .as_object()
            .is_none_or(|m| !m.keys().any(|p| p.eq_ignore_ascii_case(PROXY_CONF))),
        "{placed}"
    );
    proxy_is_itself(&lab, "win2");
}

/// A certificate and key for `system:node:<node>` signed by a CA of its
/// own that is also named `CN=kubernetes` (another cluster's), as
/// kubelet-client-current.pem holds them: made with openssl in `dir`.
fn foreign_cert(dir: &std::path::Path, node: &str) -> String {
    std::fs::create_dir_all(dir).unwrap();
    let script = format!(
        "set -e
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key -out ca.crt \
  -days 30 -subj /CN=kubernetes -addext basicConstraints=critical,CA:TRUE 2>/dev/null
openssl req -new -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout node.key \
  -subj '/O=system:nodes/CN=system:node:{node}' -out node.csr 2>/dev/null
printf 'extendedKeyUsage=clientAuth\\nbasicConstraints=CA:FALSE\\n' > ext
openssl x509 -req -in node.csr -CA ca.crt -CAkey ca.key -CAcreateserial -days 400 \
  -extfile ext -out node.crt 2>/dev/null
cat node.crt node.key"
    );
    let o = std::process::Command::new("sh")
        .args(["-c", &script])
        .current_dir(dir)
        .output()
        .expect("openssl");
    assert!(o.status.success(), "{}", text(&o));
    String::from_utf8(o.stdout).unwrap()
}

#[test]
fn a_node_holding_another_clusters_certificate_fails_verify_and_joins_again() {
    if !require_root() {
        return;
    }
    let lab = bootstrap_lab();
    let i = lab.inv();
    succeeds(&["up", "-i", &i, "--output", "json"]);
    let state = std::fs::read_to_string(lab.dir().join("inventory.kwinctl-state.json")).unwrap();
    let state: serde_json::Value = serde_json::from_str(&state).unwrap();
    let pin = state["ca_pin"]["hash"].as_str().unwrap().to_string();

    // win2 holds a certificate for itself, with the same issuer name, from
    // another CA
    let pem = foreign_cert(&lab.dir().join("foreign-ca"), "win2");
    let mut st = lab.win_state_json("win2");
    st["kubelet_files"][CURRENT] = serde_json::Value::from(pem.clone());
    common::write(&lab.win_state("win2"), &st.to_string());
    holds_its_own(&lab, "win2");
    let o = kwinctl(&["verify", "-i", &i, "--output", "json"]);
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
    let s = summary(&o);
    assert_eq!(cert_check(&s, "win1")["pass"], true, "{s}");
    let c = cert_check(&s, "win2");
    assert_eq!(c["pass"], false, "{c}");
    let detail = c["detail"].as_str().unwrap();
    assert!(
        detail.starts_with("win2: ")
            && detail.contains(&format!("not signed by the cluster CA {pin}")),
        "{detail}"
    );
    // the key beside the certificate is in no output
    let key = &pem[pem.find("-----BEGIN PRIVATE KEY-----").unwrap()..];
    let line = key.lines().nth(1).unwrap();
    assert!(!text(&o).contains(line), "the key was shown: {}", text(&o));

    // `up` joins it again, to this cluster
    let o = succeeds(&["up", "-i", &i, "--output", "json"]);
    let s = summary(&o);
    assert_eq!(host(&s, "win1")["status"], "ok", "{s}");
    assert_eq!(host(&s, "win2")["status"], "changed", "{s}");
    let now = lab.win_state_json("win2")["kubelet_files"][CURRENT]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(now, pem, "win2 kept the other cluster's certificate");
    succeeds(&["verify", "-i", &i]);
}
