//! A bootstrap token made on a control plane without `kubeadm`: the
//! `bootstrap.kubernetes.io/token` Secret written by hand, and kubeadm's
//! three bindings so that it can join and be approved
//! (docs/research/bootstrap.md#bt-secret, #bt-rbac). The secret half goes
//! to the control plane inside the script's heredoc (the script travels on
//! the session's stdin), never in a command's arguments, which `ps` shows.

use std::time::{Duration, SystemTime};

use serde_json::json;

use super::token::BootstrapToken;
use crate::secret::Secret;
/// (`said`: the last line kubectl wrote, for a message)
pub(super) use crate::text::last_line as said;
use crate::text::{clip, printable};
use crate::transport::Session;

/// kubeadm's group for node bootstrap tokens (bt-authn).
pub const GROUP: &str = "system:bootstrappers:kubeadm:default-node-token";
/// Where bootstrap-token Secrets live.
pub const NAMESPACE: &str = "kube-system";
/// The bound of one kubectl call on the control plane.
pub const BOUND: Duration = Duration::from_secs(60);

/// kubeadm's bindings for node bootstrap (bt-rbac): (name, cluster role,
/// group).
pub const BINDINGS: [(&str, &str, &str); 3] = [
    (
        "kubeadm:kubelet-bootstrap",
        "system:node-bootstrapper",
        GROUP,
    ),
    (
        "kubeadm:node-autoapprove-bootstrap",
        "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
        GROUP,
    ),
    (
        "kubeadm:node-autoapprove-certificate-rotation",
        "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
        "system:nodes",
    ),
];

const ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";

/// `n` characters of `[a-z0-9]` from the system's random source, each
/// equally likely (bytes past the last whole multiple of 36 are drawn again).
fn random(n: usize) -> Result<String, String> {
    let limit = 256 - 256 % ALPHABET.len();
    let mut out = String::with_capacity(n);
    while out.len() < n {
        let mut buf = [0u8; 32];
        getrandom::fill(&mut buf)
            .map_err(|e| format!("no random numbers from the system for a token: {e}"))?;
        for b in buf {
            if (b as usize) < limit && out.len() < n {
                out.push(ALPHABET[b as usize % ALPHABET.len()] as char);
            }
        }
    }
    Ok(out)
}

/// A new token of the form bt-token gives: a 6-character id and a
/// 16-character secret.
pub fn new_token() -> Result<BootstrapToken, String> {
    Ok(BootstrapToken {
        id: random(6)?,
        secret: Secret::new(random(16)?),
    })
}

/// Whether `id` is a token id (`[a-z0-9]{6}`).
pub fn is_id(id: &str) -> bool {
    id.len() == 6 && id.bytes().all(|b| ALPHABET.contains(&b))
}

/// The Secret's name for token `id`.
pub fn secret_name(id: &str) -> String {
    format!("bootstrap-token-{id}")
}

/// The token Secret (bt-secret), expiring at `expiration` (RFC 3339, UTC).
pub fn secret_manifest(t: &BootstrapToken, expiration: &str) -> serde_json::Value {
    json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "bootstrap.kubernetes.io/token",
        "metadata": {"name": secret_name(&t.id), "namespace": NAMESPACE},
        "stringData": {
            "description": "made by kwinctl for one run's joins; deleted when the run ends",
            "token-id": t.id,
            "token-secret": t.secret.expose(),
            "expiration": expiration,
            "usage-bootstrap-authentication": "true",
            "usage-bootstrap-signing": "true",
            "auth-extra-groups": GROUP,
        }
    })
}

/// kubeadm's three bindings as one List (bt-rbac).
pub fn bindings_manifest() -> serde_json::Value {
    let items: Vec<serde_json::Value> = BINDINGS
        .iter()
        .map(|(name, role, group)| {
            json!({
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRoleBinding",
                "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": group}]
            })
        })
        .collect();
    json!({"apiVersion": "v1", "kind": "List", "items": items})
}

/// `kubectl VERB -f -` with `manifest` on its stdin, a heredoc of the
/// script (JSON holds no line that is the delimiter).
pub(super) fn with_stdin(verb: &str, manifest: &serde_json::Value, secs: u64) -> String {
    format!(
        "timeout {secs} kubectl {verb} -f - <<'KWINCTL_MANIFEST'\n{}\nKWINCTL_MANIFEST\n",
        serde_json::to_string(manifest).expect("a manifest serializes")
    )
}

/// One script of kubectl commands on the control plane, bounded by
/// `bound`: (exit code, stdout, stderr), the texts made printable line by
/// line. The script stops at the first failing command.
pub(super) async fn kubectl(
    s: &mut dyn Session,
    script: &str,
    bound: Duration,
) -> Result<(u32, String, String), String> {
    crate::kubectl::run(s, &format!("set -e\n{script}"), bound).await
}

/// Make a token valid for `ttl` on the control plane `s` reaches (its
/// kubectl as cluster admin): kubeadm's bindings applied (a kubeadm
/// cluster has them: nothing changes), then the token's Secret created.
/// The caller deletes it with [`delete`] when the run ends.
pub async fn create(s: &mut dyn Session, ttl: Duration) -> Result<BootstrapToken, String> {
    let t = new_token()?;
    let expires = humantime::format_rfc3339_seconds(SystemTime::now() + ttl).to_string();
    let secs = BOUND.as_secs();
    let script = format!(
        "{}{}",
        with_stdin("apply", &bindings_manifest(), secs),
        with_stdin("create", &secret_manifest(&t, &expires), secs)
    );
    let (rc, _, err) = kubectl(s, &script, BOUND * 2).await?;
    if rc != 0 {
        return Err(format!(
            "could not make a bootstrap token on the control plane (kubectl exit {rc}): {}; \
             kwinctl needs kubectl there to act as cluster admin (create Secrets in {NAMESPACE} \
             and ClusterRoleBindings); `kubectl auth can-i create secrets -n {NAMESPACE}` on the \
             control plane says whether it may",
            said(&err)
        ));
    }
    Ok(t)
}

/// Delete token `id`'s Secret (a token already gone is not an error).
pub async fn delete(s: &mut dyn Session, id: &str) -> Result<(), String> {
    if !is_id(id) {
        return Err(format!(
            "{:?} is not a bootstrap token id ([a-z0-9]{{6}})",
            clip(&printable(id), 40)
        ));
    }
    let name = secret_name(id);
    crate::kubectl::delete_secret(s, &name, NAMESPACE, BOUND)
        .await
        .map_err(|why| {
            format!(
                "could not delete bootstrap token {id} ({why}); delete it on the control plane \
                 with `kubectl delete secret {name} -n {NAMESPACE}` (it expires by itself at its \
                 expiration otherwise)"
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_token_has_the_token_form_and_differs_each_time() {
        let a = new_token().unwrap();
        let b = new_token().unwrap();
        assert!(is_id(&a.id), "{}", a.id);
        assert_eq!(a.secret.expose().len(), 16);
        assert!(a.secret.expose().bytes().all(|c| ALPHABET.contains(&c)));
        assert_ne!(
            (a.id.as_str(), a.secret.expose()),
            (b.id.as_str(), b.secret.expose())
        );
        // the secret is registered: no output shows it
        assert!(!crate::secret::redact(a.secret.expose()).contains(a.secret.expose()));
    }

    #[test]
    fn the_secret_has_the_documented_fields() {
        let t = BootstrapToken {
            id: "abcdef".into(),
            secret: Secret::new("0123456789abcdef"),
        };
        let m = secret_manifest(&t, "2030-01-01T00:00:00Z");
        assert_eq!(m["type"], "bootstrap.kubernetes.io/token");
        assert_eq!(m["metadata"]["name"], "bootstrap-token-abcdef");
        assert_eq!(m["metadata"]["namespace"], "kube-system");
        let d = &m["stringData"];
        assert_eq!(d["token-id"], "abcdef");
        assert_eq!(d["token-secret"], "0123456789abcdef");
        assert_eq!(d["expiration"], "2030-01-01T00:00:00Z");
        assert_eq!(d["usage-bootstrap-authentication"], "true");
        assert_eq!(d["usage-bootstrap-signing"], "true");
        assert_eq!(d["auth-extra-groups"], GROUP);
    }

    #[test]
    fn the_bindings_are_kubeadms() {
        let m = bindings_manifest();
        let items = m["items"].as_array().unwrap();
        assert_eq!(items.len(), 3);
        assert_eq!(items[0]["metadata"]["name"], "kubeadm:kubelet-bootstrap");
        assert_eq!(items[0]["roleRef"]["name"], "system:node-bootstrapper");
        assert_eq!(items[2]["subjects"][0]["name"], "system:nodes");
    }

    #[test]
    fn the_manifest_is_on_stdin_not_in_the_arguments() {
        let t = BootstrapToken {
            id: "abcdef".into(),
            secret: Secret::new("s3cr3tzzzzzzzzzz"),
        };
        let script = with_stdin("create", &secret_manifest(&t, "x"), 60);
        let (command, body) = script.split_once('\n').unwrap();
        assert_eq!(
            command,
            "timeout 60 kubectl create -f - <<'KWINCTL_MANIFEST'"
        );
        assert!(body.contains("s3cr3tzzzzzzzzzz"));
        assert!(body.ends_with("\nKWINCTL_MANIFEST\n"));
    }

    #[test]
    fn ids_are_checked() {
        assert!(is_id("abc123"));
        assert!(!is_id("ABC123"));
        assert!(!is_id("abc12"));
        assert!(!is_id("abc12;"));
    }
}
