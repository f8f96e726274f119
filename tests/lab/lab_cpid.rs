//! The control plane's objects of issue 35, made through the library
//! (`kwinctl::join`) over an SSH session to the lab's control plane (the
//! kubectl stand-in, lab/standin/accounts.py): a bootstrap token made
//! without kubeadm lets winsim's kubelet join and is gone after `delete`;
//! kube-proxy's per-node ServiceAccount token authenticates as
//! `system:serviceaccount:kube-system:kube-proxy`, may list EndpointSlices,
//! and stops authenticating once its node's Secret is deleted
//! (docs/research/bootstrap.md, bt-secret and bt-proxy).

use std::time::Duration;

use crate::common;

use common::lab::{Lab, require_root};
use common::{kwinctl, text};
use kwinctl::join::{proxy, secret_token};
use kwinctl::transport::{self, ConfigSource, ConnectOptions, Interpreter, Session};

const K8S: &str = "1.30.4";
const CONTAINERD: &str = "1.7.20";
const DNS_IP: &str = "198.18.240.10";
const DOMAIN: &str = "cluster.local";

/// An SSH session to the lab's control plane h1, as kwinctl opens one.
fn control_plane(lab: &Lab, rt: &tokio::runtime::Runtime) -> Box<dyn Session> {
    let inv = kwinctl::inventory::Inventory::load(lab.inventory()).unwrap();
    let h = inv.host("h1").unwrap().clone();
    let routes = transport::resolve(&[&h], &ConfigSource::None).expect("routes");
    let opts = ConnectOptions::new(Duration::from_secs(20), false, routes);
    rt.block_on(transport::connect(&h, Interpreter::Sh, &opts))
        .expect("connect to h1")
}

/// A script on h1 through the session: (exit, stdout, stderr).
fn sh(rt: &tokio::runtime::Runtime, s: &mut dyn Session, script: &str) -> (u32, String, String) {
    let o = rt
        .block_on(async { tokio::time::timeout(Duration::from_secs(120), s.run(script)).await })
        .expect("h1 answers in time")
        .expect("run on h1");
    (o.exit.unwrap_or(255), o.stdout, o.stderr)
}

/// `kubectl --kubeconfig=F ARGS` on h1 with `kubeconfig` in a file made and
/// removed by the same script.
fn kubectl_as(
    rt: &tokio::runtime::Runtime,
    s: &mut dyn Session,
    kubeconfig: &str,
    args: &str,
) -> (u32, String, String) {
    let script = format!(
        "f=$(mktemp)\ntrap 'rm -f \"$f\"' EXIT\ncat > \"$f\" <<'KWINCTL_KC'\n{kubeconfig}KWINCTL_KC\n\
         kubectl --kubeconfig=\"$f\" {args}\n"
    );
    sh(rt, s, &script)
}

/// Start `service` again on `win` with `--kubeconfig=C:\k\config`
/// replaced by `kubeconfig` (placed as `path`, or the flag only).
fn restart_with(lab: &Lab, win: &str, service: &str, flags: &str, files: &[(&str, &str)]) {
    let mut st = lab.win_state_json(win);
    for (path, text) in files {
        st["placed_text"][*path] = serde_json::json!({"sha256": "-", "text": text});
    }
    let binpath = st["services"][service]["binpath"]
        .as_str()
        .unwrap()
        .replace(r"--kubeconfig=C:\k\config", flags);
    assert!(binpath.contains(flags), "{binpath}");
    st["services"][service]["binpath"] = binpath.into();
    common::write(&lab.win_state(win), &st.to_string());
    let addr = lab.ip(win);
    let script = format!(
        "# kwinctl-sim: {{\"kind\":\"prelude\",\"address\":\"{addr}\",\"adapter\":null}}\n\
         # kwinctl-sim: {{\"kind\":\"restart_service\",\"id\":0,\"name\":\"{service}\"}}\n"
    );
    let out = lab.run_windows(win, &script).expect("run").stdout;
    assert!(out.contains("KWX 0 ok"), "{out}");
}

#[test]
fn tokens_and_kube_proxy_credentials_made_without_kubeadm() {
    if !require_root() {
        return;
    }
    let lab = Lab::up_l2bridge(1, &["2022"], Some("Installed"), K8S, CONTAINERD, None);
    lab.install_kubectl("h1", DNS_IP, DOMAIN);
    let o = kwinctl(&["up", "-i", &lab.inv(), "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let rt = tokio::runtime::Runtime::new().unwrap();
    let mut s = control_plane(&lab, &rt);
    let bindings = lab.dir().join("kubectl/apiserver/clusterrolebindings");
    assert!(
        !bindings.join("kubeadm:kubelet-bootstrap.json").exists(),
        "no kubeadm here: its bindings are not there yet"
    );

    // a token Secret and kubeadm's bindings, made by hand
    let t = rt
        .block_on(secret_token::create(&mut *s, Duration::from_secs(600)))
        .expect("create a token");
    for (name, _, _) in secret_token::BINDINGS {
        assert!(bindings.join(format!("{name}.json")).exists(), "{name}");
    }
    let (rc, out, err) = sh(
        &rt,
        &mut *s,
        &format!(
            "kubectl get secret bootstrap-token-{} -n kube-system -o json",
            t.id
        ),
    );
    assert_eq!(rc, 0, "{err}");
    let secret: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(secret["type"], "bootstrap.kubernetes.io/token");

    // winsim's kubelet joins with it: a CSR from the token's user, approved
    let (rc, out, err) = sh(
        &rt,
        &mut *s,
        "kubectl get configmap cluster-info -n kube-public -o json",
    );
    assert_eq!(rc, 0, "{err}");
    let ci: serde_json::Value = serde_json::from_str(&out).unwrap();
    let info: serde_json::Value =
        serde_json::from_str(ci["data"]["kubeconfig"].as_str().unwrap()).unwrap();
    let cluster = info["clusters"][0]["cluster"].clone();
    let bootstrap = serde_json::json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": "lab", "cluster": cluster}],
        "users": [{"name": "tls-bootstrap", "user": {"token": format!("{}.{}", t.id, t.secret.expose())}}],
        "contexts": [{"name": "lab", "context": {"cluster": "lab", "user": "tls-bootstrap"}}],
        "current-context": "lab"})
    .to_string();
    restart_with(
        &lab,
        "win1",
        "kubelet",
        r"--bootstrap-kubeconfig=C:\k\bootstrap-kubelet.conf --kubeconfig=C:\k\kubelet.conf --cert-dir=C:\k\pki",
        &[(r"C:\k\bootstrap-kubelet.conf", &bootstrap)],
    );
    let st = lab.win_state_json("win1");
    assert!(
        st["kubelet_files"][r"C:\k\pki\kubelet-client-current.pem"].is_string(),
        "{}",
        st["kubelet_waiting"]
    );
    let (_, out, _) = sh(&rt, &mut *s, "kubectl get csr -o json");
    let csrs: serde_json::Value = serde_json::from_str(&out).unwrap();
    let csr = &csrs["items"][0];
    assert_eq!(
        csr["spec"]["username"],
        format!("system:bootstrap:{}", t.id)
    );
    assert_eq!(csr["status"]["conditions"][0]["reason"], "AutoApproved");

    // deleted: gone, and a second delete is no error
    rt.block_on(secret_token::delete(&mut *s, &t.id))
        .expect("delete");
    let (rc, _, err) = sh(
        &rt,
        &mut *s,
        &format!(
            "kubectl get secret bootstrap-token-{} -n kube-system -o json",
            t.id
        ),
    );
    assert_ne!(rc, 0);
    assert!(err.contains("NotFound"), "{err}");
    rt.block_on(secret_token::delete(&mut *s, &t.id))
        .expect("delete again");

    // kube-proxy: one Secret per node, the same one when asked again
    let (tok1, ca) = rt
        .block_on(proxy::ensure(&mut *s, "win1"))
        .expect("win1's credential");
    let cluster_ca = String::from_utf8(base64_decode(
        cluster["certificate-authority-data"].as_str().unwrap(),
    ))
    .unwrap();
    assert_eq!(ca.trim(), cluster_ca.trim());
    let (again, _) = rt.block_on(proxy::ensure(&mut *s, "win1")).unwrap();
    assert_eq!(again.expose(), tok1.expose());
    let (tok2, _) = rt.block_on(proxy::ensure(&mut *s, "win2")).unwrap();
    assert_ne!(tok2.expose(), tok1.expose());

    let server = cluster["server"].as_str().unwrap();
    let kc1 = proxy::kubeconfig(server, &ca, &tok1);
    let kc2 = proxy::kubeconfig(server, &ca, &tok2);
    let (rc, out, err) = kubectl_as(&rt, &mut *s, kc1.expose(), "auth whoami -o json");
    assert_eq!(rc, 0, "{err}");
    let who: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(
        who["status"]["userInfo"]["username"],
        "system:serviceaccount:kube-system:kube-proxy"
    );
    let (rc, _, err) = kubectl_as(&rt, &mut *s, kc1.expose(), "get endpointslices -A -o json");
    assert_eq!(rc, 0, "{err}");

    // winsim's kube-proxy with it: nothing refused
    restart_with(
        &lab,
        "win1",
        "kube-proxy",
        r"--kubeconfig=C:\k\kube-proxy.conf",
        &[(r"C:\k\kube-proxy.conf", kc1.expose())],
    );
    assert!(
        lab.win_state_json("win1")["kube_proxy_refused"].is_null(),
        "{}",
        lab.win_state_json("win1")["kube_proxy_refused"]
    );

    // win1's Secret deleted: its token is refused, win2's still works
    rt.block_on(proxy::delete(&mut *s, "win1")).expect("delete");
    let (rc, _, err) = kubectl_as(&rt, &mut *s, kc1.expose(), "get endpointslices -A -o json");
    assert_eq!(rc, 1);
    assert!(err.contains("Unauthorized"), "{err}");
    let (rc, _, err) = kubectl_as(&rt, &mut *s, kc2.expose(), "get endpointslices -A -o json");
    assert_eq!(rc, 0, "{err}");
    restart_with(
        &lab,
        "win1",
        "kube-proxy",
        r"--kubeconfig=C:\k\kube-proxy.conf",
        &[],
    );
    let refused = lab.win_state_json("win1")["kube_proxy_refused"].clone();
    assert!(
        refused
            .as_str()
            .is_some_and(|l| l.contains("failed to list *v1.EndpointSlice: Unauthorized")),
        "{refused}"
    );
    rt.block_on(proxy::delete(&mut *s, "win1"))
        .expect("delete again");
    rt.block_on(s.close());
}

fn base64_decode(s: &str) -> Vec<u8> {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD
        .decode(s)
        .expect("base64")
}
