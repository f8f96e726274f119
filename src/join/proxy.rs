//! kube-proxy's own identity on a Windows node
//! (docs/research/bootstrap.md#bt-proxy): the ServiceAccount
//! `kube-system/kube-proxy` bound to `system:node-proxier` as kubeadm binds
//! it, and one long-lived token Secret per node, filled by the token
//! controller, so that deleting one node's Secret revokes that node alone.

use std::time::{Duration, Instant};

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::json;

use super::secret_token::{BOUND, kubectl, said, with_stdin};
use crate::render::sh_quote;
use crate::secret::Secret;
use crate::text::{clip, printable};
use crate::transport::Session;

pub const NAMESPACE: &str = "kube-system";
pub const SERVICE_ACCOUNT: &str = "kube-proxy";
/// kubeadm's binding of its kube-proxy ServiceAccount.
pub const BINDING: &str = "kubeadm:node-proxier";
pub const ROLE: &str = "system:node-proxier";
/// How long the token controller may take to fill a new Secret.
pub const FILL_WAIT: Duration = Duration::from_secs(60);

/// Node `node`'s token Secret.
pub fn secret_name(node: &str) -> String {
    format!("kwinctl-kube-proxy-{node}")
}

/// Whether `node` is a node name (a DNS subdomain, lower case) that makes
/// a valid Secret name.
pub fn is_node_name(node: &str) -> bool {
    let name = secret_name(node);
    !node.is_empty()
        && name.len() <= 253
        && node
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.')
        && node.starts_with(|c: char| c.is_ascii_alphanumeric())
        && node.ends_with(|c: char| c.is_ascii_alphanumeric())
}

/// The ServiceAccount, kubeadm's binding and node `node`'s token Secret, as
/// one List for `kubectl apply` (applied again, nothing changes; the
/// controller's fields stay).
pub fn manifests(node: &str) -> serde_json::Value {
    json!({"apiVersion": "v1", "kind": "List", "items": [
        {"apiVersion": "v1", "kind": "ServiceAccount",
         "metadata": {"name": SERVICE_ACCOUNT, "namespace": NAMESPACE}},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
         "metadata": {"name": BINDING},
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": ROLE},
         "subjects": [{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": NAMESPACE}]},
        {"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/service-account-token",
         "metadata": {"name": secret_name(node), "namespace": NAMESPACE,
                      "labels": {"app.kubernetes.io/managed-by": "kwinctl"},
                      "annotations": {"kubernetes.io/service-account.name": SERVICE_ACCOUNT}}}
    ]})
}

/// The token and the CA certificate of a `kubectl get secret -o json`
/// answer; `None` while the token controller has not filled them.
pub fn parse_secret(json_text: &str) -> Result<Option<(Secret, String)>, String> {
    let v: serde_json::Value = serde_json::from_str(json_text)
        .map_err(|e| format!("kubectl get secret answered something that is not JSON ({e})"))?;
    let field = |k: &str| -> Result<Option<String>, String> {
        match v["data"][k].as_str() {
            None | Some("") => Ok(None),
            Some(b) => {
                let bytes = STANDARD
                    .decode(b)
                    .map_err(|_| format!("the Secret's {k} is not base64"))?;
                String::from_utf8(bytes)
                    .map(Some)
                    .map_err(|_| format!("the Secret's {k} is not text"))
            }
        }
    };
    let token = field("token")?.map(Secret::new);
    match (token, field("ca.crt")?) {
        (Some(t), Some(ca)) => Ok(Some((t, ca))),
        _ => Ok(None),
    }
}

/// Make sure kube-proxy's ServiceAccount and binding exist and node
/// `node` has its token Secret (created, or the one it has), waiting
/// (bounded) for the token controller to fill it. Returns the token and the
/// cluster CA (PEM) the Secret carries.
pub async fn ensure(s: &mut dyn Session, node: &str) -> Result<(Secret, String), String> {
    if !is_node_name(node) {
        return Err(format!(
            "{:?} is not a node name kwinctl can name a Secret after (lower-case letters, \
             digits, '-' and '.')",
            clip(&printable(node), 80)
        ));
    }
    let name = secret_name(node);
    let (rc, _, err) = kubectl(
        s,
        &with_stdin("apply", &manifests(node), BOUND.as_secs()),
        BOUND,
    )
    .await?;
    if rc != 0 {
        return Err(format!(
            "could not make kube-proxy's credential for {node} on the control plane (kubectl \
             exit {rc}): {}; kwinctl needs kubectl there to act as cluster admin (ServiceAccounts \
             and Secrets in {NAMESPACE}, ClusterRoleBindings)",
            said(&err)
        ));
    }
    let start = Instant::now();
    let get = format!(
        "timeout {} kubectl get secret {} -n {NAMESPACE} -o json\n",
        BOUND.as_secs(),
        sh_quote(&name)
    );
    loop {
        let (rc, out, err) = kubectl(s, &get, BOUND).await?;
        if rc == 0 {
            if let Some(found) = parse_secret(&out)? {
                return Ok(found);
            }
        } else if !err.contains("(NotFound)") {
            return Err(format!(
                "could not read Secret {NAMESPACE}/{name} (kubectl exit {rc}): {}",
                said(&err)
            ));
        }
        if start.elapsed() >= FILL_WAIT {
            return Err(format!(
                "the token controller did not fill Secret {NAMESPACE}/{name} within {}s (or \
                 deleted it: it does when ServiceAccount {NAMESPACE}/{SERVICE_ACCOUNT} is \
                 missing); check that kube-controller-manager runs with \
                 --service-account-private-key-file and --root-ca-file, then run kwinctl again",
                FILL_WAIT.as_secs()
            ));
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// kube-proxy's kubeconfig: the API server `server`, the cluster CA
/// `ca_pem` and the token, as JSON (a kubeconfig is YAML, and JSON is
/// YAML). Secret as a whole: it holds the token.
pub fn kubeconfig(server: &str, ca_pem: &str, token: &Secret) -> Secret {
    let kc = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "kubernetes", "cluster": {
            "server": server,
            "certificate-authority-data": STANDARD.encode(ca_pem.as_bytes())}}],
        "users": [{"name": "kube-proxy", "user": {"token": token.expose()}}],
        "contexts": [{"name": "kube-proxy", "context": {"cluster": "kubernetes", "user": "kube-proxy"}}],
        "current-context": "kube-proxy"
    });
    Secret::new(serde_json::to_string_pretty(&kc).expect("a kubeconfig serializes") + "\n")
}

/// Delete node `node`'s token Secret (`reset`): its kube-proxy's token
/// stops authenticating at once. A Secret already gone is not an error.
pub async fn delete(s: &mut dyn Session, node: &str) -> Result<(), String> {
    if !is_node_name(node) {
        return Err(format!(
            "{:?} is not a node name",
            clip(&printable(node), 80)
        ));
    }
    let name = secret_name(node);
    crate::kubectl::delete_secret(s, &name, NAMESPACE, BOUND)
        .await
        .map_err(|why| {
            format!(
                "could not delete kube-proxy's credential for {node} ({why}); delete it on the \
                 control plane with `kubectl delete secret {name} -n {NAMESPACE}`"
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn node_names_are_checked() {
        assert!(is_node_name("win1"));
        assert!(is_node_name("w-one.example"));
        assert!(!is_node_name("Win1"));
        assert!(!is_node_name("-a"));
        assert!(!is_node_name("a b"));
        assert!(!is_node_name(""));
    }

    #[test]
    fn the_manifests_are_kubeadms_identity_and_a_secret_per_node() {
        let m = manifests("win1");
        let items = m["items"].as_array().unwrap();
        assert_eq!(items[0]["kind"], "ServiceAccount");
        assert_eq!(items[1]["metadata"]["name"], "kubeadm:node-proxier");
        assert_eq!(items[1]["roleRef"]["name"], "system:node-proxier");
        assert_eq!(items[1]["subjects"][0]["kind"], "ServiceAccount");
        assert_eq!(items[2]["type"], "kubernetes.io/service-account-token");
        assert_eq!(items[2]["metadata"]["name"], "kwinctl-kube-proxy-win1");
        assert_eq!(
            items[2]["metadata"]["annotations"]["kubernetes.io/service-account.name"],
            "kube-proxy"
        );
    }

    #[test]
    fn a_filled_secret_gives_its_token_and_ca() {
        let b = |s: &str| STANDARD.encode(s);
        let filled = json!({"data": {"token": b("tok-QQ7-zz9"), "ca.crt": b("PEM"), "namespace": b("kube-system")}});
        let (t, ca) = parse_secret(&filled.to_string()).unwrap().unwrap();
        assert_eq!((t.expose(), ca.as_str()), ("tok-QQ7-zz9", "PEM"));
        // registered: no output shows it, nor its base64
        assert!(!crate::secret::redact(&filled.to_string()).contains(&b("tok-QQ7-zz9")));
        assert!(
            parse_secret(r#"{"data": {"ca.crt": "UEVN"}}"#)
                .unwrap()
                .is_none()
        );
        assert!(parse_secret(r#"{"metadata": {}}"#).unwrap().is_none());
        assert!(parse_secret(r#"{"data": {"token": "%%"}}"#).is_err());
        assert!(parse_secret("not json").is_err());
    }

    #[test]
    fn the_kubeconfig_holds_server_ca_and_token() {
        let token = Secret::new("kp-token-77xq");
        let kc = kubeconfig("https://198.18.1.1:6443", "PEM\n", &token);
        let v: serde_json::Value = serde_json::from_str(kc.expose()).unwrap();
        assert_eq!(
            v["clusters"][0]["cluster"]["server"],
            "https://198.18.1.1:6443"
        );
        assert_eq!(
            v["clusters"][0]["cluster"]["certificate-authority-data"],
            STANDARD.encode("PEM\n")
        );
        assert_eq!(v["users"][0]["user"]["token"], "kp-token-77xq");
        assert_eq!(v["current-context"], "kube-proxy");
        assert_eq!(
            format!("{kc:?}"),
            format!("Secret({})", crate::secret::MASK)
        );
        // it is YAML too, as client-go reads it
        let y: serde_json::Value = serde_saphyr::from_str(kc.expose()).unwrap();
        assert_eq!(y, v);
    }
}
