//! Issue 35: each Windows node joins the cluster with an identity of its
//! own, as `kubeadm join` does (docs/research/bootstrap.md): a node whose
//! kubelet holds no valid client certificate for itself gets a bootstrap
//! kubeconfig (the API server, the pinned cluster CA, the run's bootstrap
//! token), its kubelet bootstraps (TLS bootstrapping: a CSR the controller
//! manager approves), and the bootstrap kubeconfig is removed again.
//!
//! One token per run at most, made only when some node must join and
//! deleted when the run ends (`token.rs`); the CA is pinned like kubeadm's
//! discovery (`ca.rs`). Without kubeadm on the control plane the token is
//! a Secret written with kubectl (`secret_token.rs`; [`make`] chooses).
//! kube-proxy gets an identity of its own too: a ServiceAccount token per
//! node (`proxy.rs`), its CA checked against the same pin. [`Joiner`] is the run's: the hosts' tasks ask it
//! for the bootstrap kubeconfig, and the run ends it.

pub mod ca;
pub mod proxy;
pub mod secret_token;
pub mod token;

use std::future::Future;
use std::time::Duration;

use token::BootstrapToken;

use crate::transport::Session;

/// What the run decided about the cluster CA and the token, for its end.
#[derive(Debug, Default)]
pub struct Ended {
    /// The token made and deleted (its id), if any.
    pub token: Option<String>,
    /// A new CA pin to keep in the state file.
    pub pin: Option<ca::Pin>,
    /// Why the token could not be deleted (with its id and the command).
    pub failure: Option<String>,
}

#[derive(Default)]
struct Inner {
    /// What the first request got: the bootstrap kubeconfig, or why not.
    issued: Option<Result<Vec<u8>, String>>,
    session: Option<Box<dyn crate::transport::Session>>,
    token: Option<(BootstrapToken, Via)>,
    pin: Option<ca::Pin>,
    /// The pin the CA's judgement would keep, until a join keeps it.
    judged: Option<ca::Pin>,
}

/// The run's joins: the CA read and judged, and one token, on first need.
pub struct Joiner {
    api_server: String,
    kept: Option<ca::Pin>,
    accept: Option<String>,
    bound: Duration,
    inner: tokio::sync::Mutex<Inner>,
    /// The cluster CA, read and judged once (src/identity/issuer.rs).
    anchor: std::sync::OnceLock<Result<ca::Ca, String>>,
}

impl Joiner {
    /// `kept`: the state file's pin; `accept`: `up --accept-ca`; `bound`:
    /// how long one command on the control plane may take.
    pub fn new(
        api_server: &str,
        kept: Option<ca::Pin>,
        accept: Option<String>,
        bound: Duration,
    ) -> Joiner {
        Joiner {
            api_server: api_server.to_string(),
            kept,
            accept,
            bound,
            inner: tokio::sync::Mutex::new(Inner::default()),
            anchor: std::sync::OnceLock::new(),
        }
    }

    /// Whether this run accepts a rotated cluster CA (`up --accept-ca` with
    /// another pin than the state file's): every node's certificate is
    /// then from the old CA, and every node joins again.
    pub fn rotating(&self) -> bool {
        self.accept
            .as_deref()
            .is_some_and(|a| self.kept.as_ref().is_some_and(|k| k.hash != a))
    }

    /// The bootstrap kubeconfig for a joining node (the same for every node
    /// of the run): on the first call the control plane is reached through
    /// `open`, its CA judged against the pin and the run's token made.
    pub async fn bootstrap_kubeconfig<F>(&self, open: F) -> Result<Vec<u8>, String>
    where
        F: Future<Output = Result<Box<dyn crate::transport::Session>, String>>,
    {
        let mut g = self.inner.lock().await;
        if let Some(r) = &g.issued {
            return r.clone();
        }
        let r = self.issue(&mut g, open).await;
        g.issued = Some(r.clone());
        r
    }

    /// The cluster CA from the control plane (reached through `open` on the
    /// first call), judged against the state file's pin: the same for the
    /// whole run.
    pub async fn cluster_ca<F>(&self, open: F) -> Result<ca::Ca, String>
    where
        F: Future<Output = Result<Box<dyn crate::transport::Session>, String>>,
    {
        let mut g = self.inner.lock().await;
        self.ca_in(&mut g, open).await
    }

    /// The cluster CA, once [`Joiner::cluster_ca`] read it.
    pub fn ca(&self) -> Option<&Result<ca::Ca, String>> {
        self.anchor.get()
    }

    async fn ca_in<F>(&self, g: &mut Inner, open: F) -> Result<ca::Ca, String>
    where
        F: Future<Output = Result<Box<dyn crate::transport::Session>, String>>,
    {
        if let Some(a) = self.anchor.get() {
            return a.clone();
        }
        let got = async {
            if g.session.is_none() {
                let s = open.await.map_err(|e| {
                    format!("cannot reach the control plane to read the cluster CA: {e}")
                })?;
                g.session = Some(s);
            }
            let s = g.session.as_mut().expect("a session was just kept");
            let ca = ca::fetch(&mut **s, self.bound).await?;
            let now = humantime::format_rfc3339_seconds(std::time::SystemTime::now()).to_string();
            g.judged = ca::judge(&ca, self.kept.as_ref(), self.accept.as_deref(), &now)?;
            Ok(ca)
        }
        .await;
        self.anchor.get_or_init(|| got).clone()
    }

    /// kube-proxy's kubeconfig for node `node` (lower case): its own token
    /// Secret made or found on the control plane (`proxy.rs`), the CA that
    /// comes with it checked against the run's pinned CA (kept as the pin,
    /// as a join keeps it). Secret: it is registered before anything could
    /// print it.
    pub async fn proxy_kubeconfig<F>(&self, node: &str, open: F) -> Result<Vec<u8>, String>
    where
        F: Future<Output = Result<Box<dyn crate::transport::Session>, String>>,
    {
        let mut g = self.inner.lock().await;
        let ca = self.ca_in(&mut g, open).await?;
        // a pin new to the state file is kept, as a join keeps it
        if g.judged.is_some() {
            g.pin = g.judged.clone();
        }
        let s = g
            .session
            .as_mut()
            .ok_or("cannot reach the control plane for kube-proxy's token")?;
        let (token, pem) = proxy::ensure(&mut **s, node).await?;
        match ca::pin_of(&pem) {
            Some(h) if h == ca.hash => {}
            got => {
                return Err(format!(
                    "the cluster CA in kube-proxy's token Secret {}/{} ({}) is not the cluster CA \
                     this run pinned ({}): kwinctl refuses to give kube-proxy a credential for \
                     another cluster; check kube-controller-manager's --root-ca-file on the \
                     control plane, then run kwinctl again",
                    proxy::NAMESPACE,
                    proxy::secret_name(node),
                    got.as_deref().unwrap_or("no certificate"),
                    ca.hash
                ));
            }
        }
        let conf = proxy::kubeconfig(&self.api_server, &pem, &token);
        let bytes = conf.expose().as_bytes().to_vec();
        crate::secret::register_file(&bytes, PROXY_SHOWN_AS);
        Ok(bytes)
    }

    async fn issue<F>(&self, g: &mut Inner, open: F) -> Result<Vec<u8>, String>
    where
        F: Future<Output = Result<Box<dyn crate::transport::Session>, String>>,
    {
        let ca = self.ca_in(g, open).await?;
        g.pin = g.judged.clone();
        let s = g
            .session
            .as_mut()
            .ok_or("cannot reach the control plane to join the node")?;
        let (t, via) = make(&mut **s, token::TTL, self.bound).await?;
        let conf = bootstrap_kubeconfig(&self.api_server, &ca.pem, &t);
        crate::secret::register_file(&conf, BOOTSTRAP_SHOWN_AS);
        g.token = Some((t, via));
        Ok(conf)
    }

    /// The run ends: its token (if one was made) is deleted.
    pub async fn end(&self) -> Ended {
        let mut g = self.inner.lock().await;
        let mut ended = Ended {
            pin: g.pin.take(),
            ..Ended::default()
        };
        if let Some((t, via)) = g.token.take() {
            ended.token = Some(t.id.clone());
            ended.failure = match g.session.as_mut() {
                Some(s) => remove(&mut **s, &t.id, via, self.bound).await.err(),
                None => Some(format!(
                    "the run's bootstrap token {} could not be deleted (no session to the control plane); delete it there: `{}`",
                    t.id,
                    remove_command(&t.id, via)
                )),
            };
        }
        if let Some(s) = g.session.take() {
            s.close().await;
        }
        ended
    }
}

/// How a bootstrap kubeconfig is named where redaction replaces it.
pub const BOOTSTRAP_SHOWN_AS: &str = "bootstrap kubeconfig";

/// The bootstrap kubeconfig `kubeadm join` writes (its
/// `bootstrap-kubelet.conf`): the API server, the CA's data and the token
/// (docs/research/bootstrap.md#bt-join). JSON, which is YAML.
pub fn bootstrap_kubeconfig(api_server: &str, ca_pem: &str, t: &BootstrapToken) -> Vec<u8> {
    use base64::Engine;
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem.as_bytes());
    let v = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "kubernetes", "cluster": {
            "server": api_server,
            "certificate-authority-data": ca,
        }}],
        "users": [{"name": "tls-bootstrap-token-user", "user": {"token": t.expose()}}],
        "contexts": [{"name": "tls-bootstrap-token-user@kubernetes", "context": {
            "cluster": "kubernetes",
            "user": "tls-bootstrap-token-user",
        }}],
        "current-context": "tls-bootstrap-token-user@kubernetes",
    });
    let mut out = serde_json::to_vec_pretty(&v).expect("a kubeconfig serializes");
    out.push(b'\n');
    out
}

/// How the run's token was made, and so how it is deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Via {
    /// `kubeadm token create`.
    Kubeadm,
    /// The token Secret written with kubectl (`secret_token.rs`): the
    /// control plane has no kubeadm.
    Secret,
}

/// The run's token: with `kubeadm token create` where the control plane
/// has kubeadm, else its Secret written with kubectl (the one place that
/// chooses).
pub async fn make(
    s: &mut dyn Session,
    ttl: Duration,
    bound: Duration,
) -> Result<(BootstrapToken, Via), String> {
    match token::create(s, ttl, bound).await? {
        Some(t) => Ok((t, Via::Kubeadm)),
        None => secret_token::create(s, ttl).await.map(|t| (t, Via::Secret)),
    }
}

/// Delete token `id` the way it was made.
pub async fn remove(
    s: &mut dyn Session,
    id: &str,
    via: Via,
    bound: Duration,
) -> Result<(), String> {
    match via {
        Via::Kubeadm => token::delete(s, id, bound).await,
        Via::Secret => secret_token::delete(s, id).await,
    }
}

/// The command that deletes token `id`, made `via`, by hand.
pub fn remove_command(id: &str, via: Via) -> String {
    match via {
        Via::Kubeadm => token::delete_command(id),
        Via::Secret => format!(
            "kubectl delete secret {} -n {}",
            secret_token::secret_name(id),
            secret_token::NAMESPACE
        ),
    }
}

/// How kube-proxy's kubeconfig is named where redaction replaces it.
pub const PROXY_SHOWN_AS: &str = "kube-proxy kubeconfig";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_run_rotates_only_when_it_accepts_another_pin() {
        let kept = ca::Pin {
            hash: "sha256:aa".into(),
            since: "2026-01-01T00:00:00Z".into(),
        };
        let j = |kept: Option<ca::Pin>, accept: Option<&str>| {
            Joiner::new(
                "https://x:6443",
                kept,
                accept.map(String::from),
                Duration::from_secs(1),
            )
        };
        assert!(!j(Some(kept.clone()), None).rotating());
        assert!(!j(Some(kept.clone()), Some("sha256:aa")).rotating());
        assert!(j(Some(kept), Some("sha256:bb")).rotating());
        assert!(!j(None, Some("sha256:bb")).rotating());
    }

    #[test]
    fn the_bootstrap_kubeconfig_names_the_server_the_ca_and_the_token() {
        let t = BootstrapToken::parse("abcdef.q1w2e3r4t5y6u7i8").unwrap();
        let conf = bootstrap_kubeconfig("https://198.18.0.2:6443", "PEM", &t);
        let v: serde_json::Value = serde_json::from_slice(&conf).unwrap();
        assert_eq!(
            v["clusters"][0]["cluster"]["server"],
            "https://198.18.0.2:6443"
        );
        assert_eq!(
            v["clusters"][0]["cluster"]["certificate-authority-data"],
            "UEVN"
        );
        assert_eq!(v["users"][0]["user"]["token"], "abcdef.q1w2e3r4t5y6u7i8");
        assert_eq!(
            crate::secret::in_kubeconfig(std::str::from_utf8(&conf).unwrap()),
            vec!["abcdef.q1w2e3r4t5y6u7i8".to_string()]
        );
    }

    #[test]
    fn a_token_is_deleted_by_hand_the_way_it_was_made() {
        assert_eq!(
            remove_command("abcdef", Via::Kubeadm),
            "kubeadm token delete abcdef"
        );
        assert_eq!(
            remove_command("abcdef", Via::Secret),
            "kubectl delete secret bootstrap-token-abcdef -n kube-system"
        );
    }
}
