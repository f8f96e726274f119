//! `cluster.kubeconfig`, read at load: kwinctl copies this one file to
//! `C:\k\config` on every Windows node, so it must carry everything in it.
//! A kubeconfig that refers to other files (`certificate-authority:`,
//! `client-certificate:`, `client-key:`, `tokenFile:`) would point at paths
//! that do not exist on the node — Linux kubeconfigs often do, e.g. kubeadm's
//! `/var/lib/kubelet/pki/kubelet-client-current.pem` (kubeadm #1393: "kubelet
//! is joining paths to /etc/kubernetes/pki/ca.crt incorrectly"), and an
//! `exec:`/`auth-provider:` plugin runs a program the node does not have.
//! Each such value is reported with the kubeconfig's own file:line:column and
//! how to embed it instead.

use std::path::Path;

use serde::Deserialize;
use serde::de::IgnoredAny;
use serde_saphyr::Spanned;

use super::KubeVersion;
use super::raw::RawCluster;
use super::validator::Validator;

/// `cluster.identity`: how Windows nodes get their credentials
/// (docs/windows.md, One kubelet identity; issue 35).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Identity {
    /// Each node joins with a bootstrap token and gets a client certificate
    /// of its own (TLS bootstrapping, as `kubeadm join` does).
    Bootstrap,
    /// Every node uses the one credential in `cluster.kubeconfig`.
    Shared,
}

impl Identity {
    pub fn parse(s: &str) -> Option<Identity> {
        match s.trim() {
            "bootstrap" => Some(Identity::Bootstrap),
            "shared" => Some(Identity::Shared),
            _ => None,
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Identity::Bootstrap => "bootstrap",
            Identity::Shared => "shared",
        }
    }
}

#[derive(Debug, Default, Deserialize)]
struct Kubeconfig {
    #[serde(default)]
    clusters: Vec<Named<KcCluster>>,
    #[serde(default)]
    users: Vec<NamedUser>,
}

#[derive(Debug, Default, Deserialize)]
struct Named<T> {
    #[serde(default)]
    cluster: Option<T>,
}

#[derive(Debug, Default, Deserialize)]
struct NamedUser {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    user: Option<User>,
}

#[derive(Debug, Default, Deserialize)]
struct KcCluster {
    #[serde(default)]
    server: Option<Spanned<String>>,
    #[serde(default, rename = "certificate-authority")]
    certificate_authority: Option<Spanned<String>>,
}

#[derive(Debug, Default, Deserialize)]
struct User {
    #[serde(default, rename = "client-certificate")]
    client_certificate: Option<Spanned<String>>,
    #[serde(default, rename = "client-key")]
    client_key: Option<Spanned<String>>,
    #[serde(default, rename = "client-certificate-data")]
    client_certificate_data: Option<String>,
    #[serde(default, rename = "client-key-data")]
    client_key_data: Option<String>,
    #[serde(default)]
    token: Option<String>,
    #[serde(default, rename = "tokenFile")]
    token_file: Option<Spanned<String>>,
    #[serde(default)]
    username: Option<String>,
    #[serde(default)]
    exec: Option<Spanned<IgnoredAny>>,
    #[serde(default, rename = "auth-provider")]
    auth_provider: Option<Spanned<IgnoredAny>>,
}

/// One thing wrong in a kubeconfig: its own position, what, and the fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KcProblem {
    pub line: usize,
    pub column: usize,
    pub message: String,
    pub hint: String,
}

fn at<T>(s: &Spanned<T>) -> (usize, usize) {
    (s.referenced.line() as usize, s.referenced.column() as usize)
}

/// Check a kubeconfig's text; `https` says whether the cluster's API server
/// is reached over TLS (then a user without embedded credentials is an
/// error: the kubelet would be anonymous).
pub fn check(text: &str, https: bool) -> Vec<KcProblem> {
    let kc: Kubeconfig = match serde_saphyr::from_str(text) {
        Ok(k) => k,
        Err(e) => {
            let (line, column) = e
                .location()
                .map(|l| (l.line() as usize, l.column() as usize))
                .unwrap_or((1, 1));
            return vec![KcProblem {
                line,
                column,
                message: format!(
                    "not a kubeconfig: {}",
                    super::validate::first_line(&e.to_string())
                ),
                hint: "point cluster.kubeconfig at a kubeconfig file (YAML with clusters, users and contexts)".into(),
            }];
        }
    };
    let mut out = Vec::new();
    let file_ref = |what: String, s: &Spanned<String>, data: &str| {
        let (line, column) = at(s);
        KcProblem {
            line,
            column,
            message: format!(
                "{what} refers to the file {:?}; kwinctl copies only the kubeconfig to the Windows nodes (C:\\k\\config), so that file would be missing there",
                s.value
            ),
            hint: format!(
                "use {data} (the file's contents, base64) instead — `kubectl config view --flatten --minify --kubeconfig FILE > kubelet.kubeconfig` writes a kubeconfig with the *-data fields filled in"
            ),
        }
    };
    if kc.clusters.is_empty() {
        out.push(KcProblem {
            line: 1,
            column: 1,
            message: "the kubeconfig has no clusters".into(),
            hint: "give a kubeconfig with the API server under clusters[].cluster.server".into(),
        });
    }
    for (i, c) in kc.clusters.iter().enumerate() {
        let Some(c) = &c.cluster else { continue };
        if let Some(ca) = &c.certificate_authority {
            out.push(file_ref(
                format!("clusters[{i}].cluster.certificate-authority"),
                ca,
                "certificate-authority-data",
            ));
        }
        if c.server.is_none() {
            out.push(KcProblem {
                line: 1,
                column: 1,
                message: format!("clusters[{i}] has no server"),
                hint: "add clusters[].cluster.server: https://HOST:PORT".into(),
            });
        }
    }
    for (i, u) in kc.users.iter().enumerate() {
        let Some(user) = &u.user else { continue };
        let who = format!("users[{i}].user");
        if let Some(s) = &user.client_certificate {
            out.push(file_ref(
                format!("{who}.client-certificate"),
                s,
                "client-certificate-data",
            ));
        }
        if let Some(s) = &user.client_key {
            out.push(file_ref(format!("{who}.client-key"), s, "client-key-data"));
        }
        if let Some(s) = &user.token_file {
            out.push(file_ref(format!("{who}.tokenFile"), s, "token"));
        }
        for (name, plugin) in [("exec", &user.exec), ("auth-provider", &user.auth_provider)] {
            if let Some(p) = plugin {
                let (line, column) = at(p);
                out.push(KcProblem {
                    line,
                    column,
                    message: format!(
                        "{who}.{name} runs a credential plugin on the node, which a Windows node set up by kwinctl does not have"
                    ),
                    hint: "give the node's credentials in the file: client-certificate-data and client-key-data, or a token".into(),
                });
            }
        }
        let has_creds = (user.client_certificate_data.is_some() && user.client_key_data.is_some())
            || user.token.is_some()
            || user.username.is_some()
            || user.client_certificate.is_some()
            || user.token_file.is_some()
            || user.exec.is_some()
            || user.auth_provider.is_some();
        if https && !has_creds {
            out.push(KcProblem {
                line: 1,
                column: 1,
                message: format!(
                    "users[{i}] ({}) has no credentials: the kubelet would talk to the https API server anonymously",
                    u.name.as_deref().unwrap_or("unnamed")
                ),
                hint: "give client-certificate-data and client-key-data, or a token".into(),
            });
        }
    }
    out
}

/// Read and check a kubeconfig file; problems carry its path in the message.
pub fn check_file(path: &Path, https: bool) -> Result<Vec<KcProblem>, std::io::Error> {
    let bytes = read(path)?;
    let text = String::from_utf8(bytes).map_err(|_| {
        std::io::Error::new(std::io::ErrorKind::InvalidData, "it is not UTF-8 text")
    })?;
    Ok(check(&text, https))
}

/// The largest kubeconfig kwinctl reads (a kubeconfig with embedded
/// certificates is a few KiB).
pub const MAX_BYTES: u64 = crate::localfile::Kind::Kubeconfig.max();

/// Read the kubeconfig at `path`: only a regular file of at most
/// [`MAX_BYTES`] (see `localfile`).
pub fn read(path: &Path) -> std::io::Result<Vec<u8>> {
    crate::localfile::read(path, crate::localfile::Kind::Kubeconfig)
}

/// The inventory's rules for what Windows nodes take from `cluster:` (the
/// per-release rules are the Windows profile's, in `os/windows/k8s.rs`).
impl Validator {
    fn add(&mut self, pos: super::Pos, message: impl Into<String>, hint: impl Into<String>) {
        self.problems.push(super::Problem {
            pos,
            message: message.into(),
            hint: hint.into(),
        });
    }

    /// `cluster.kubernetes_version`, parsed; false when it is not a release.
    pub(super) fn kubernetes_version(&mut self, c: &RawCluster) -> (Option<KubeVersion>, bool) {
        let Some(v) = &c.kubernetes_version else {
            return (None, true);
        };
        match KubeVersion::parse(&v.value) {
            Some(k) => (Some(k), true),
            None => {
                self.add(
                    v.into(),
                    format!("kubernetes_version {:?} is not a Kubernetes release", v.value),
                    "write the release the Windows nodes' kubelet.exe and kube-proxy.exe are, e.g. \"1.34.2\" (or \"1.34\" for any 1.34.x)",
                );
                (None, false)
            }
        }
    }

    /// `cluster.kubeconfig`, read and checked: each problem at the key, with
    /// the kubeconfig's own file:line:column in the message.
    pub(super) fn kubeconfig(&mut self, c: &RawCluster, path: Option<&Path>, https: bool) -> bool {
        let (Some(path), Some(k)) = (path, &c.kubeconfig) else {
            return true;
        };
        match check_file(path, https) {
            Err(e) => {
                self.add(
                    k.into(),
                    format!("kubeconfig {} cannot be read: {e}", path.display()),
                    "point cluster.kubeconfig at a readable kubeconfig file (relative paths are relative to the inventory)",
                );
                false
            }
            Ok(problems) => {
                let ok = problems.is_empty();
                for p in problems {
                    self.add(
                        k.into(),
                        format!(
                            "kubeconfig {}:{}:{}: {}",
                            path.display(),
                            p.line,
                            p.column,
                            p.message
                        ),
                        p.hint,
                    );
                }
                ok
            }
        }
    }

    /// What Windows nodes need from `cluster:` whatever their Kubernetes
    /// version: the version itself, and credentials for an https API server
    /// (the per-version rules are the Windows profile's, in `os/windows/k8s.rs`).
    pub(super) fn windows_cluster(&mut self, c: &super::Cluster, first: &str) {
        let Some(api_server) = &c.api_server else {
            self.add(
                c.pos.name,
                format!(
                    "cluster.api_server is required: host {first} is a Windows node, and its kubelet and kube-proxy talk to the API server"
                ),
                "add `api_server: https://HOST:6443` (the control plane's API server) under cluster:",
            );
            return;
        };
        if c.kubernetes_version.is_none() {
            self.add(
                c.pos.name,
                format!(
                    "cluster.kubernetes_version is required: host {first} is a Windows node, and which kubelet and kube-proxy flags exist depends on the release"
                ),
                "add `kubernetes_version: \"1.16.15\"` (the release of the nodes' kubelet.exe and kube-proxy.exe) under cluster:",
            );
        }
        // Without cluster.identity the release decides (bootstrap where it
        // can, os/windows/k8s/check.rs `identity`), and so do its problems.
        if c.identity_given == Some(Identity::Bootstrap) && c.kubeconfig.is_some() {
            self.add(
                c.pos.identity.unwrap_or(c.pos.name),
                "cluster.identity is bootstrap, and cluster.kubeconfig is given: the nodes would not use it (each joins with its own certificate)".to_string(),
                "remove cluster.kubeconfig, or set `identity: shared` to give every node the kubeconfig's credential",
            );
        }
        if api_server.starts_with("https://")
            && c.kubeconfig.is_none()
            && c.identity_given == Some(Identity::Shared)
        {
            self.add(
                c.pos.api_server.unwrap_or(c.pos.name),
                format!(
                    "api_server {api_server} is https, and host {first} is a Windows node: without cluster.kubeconfig its kubelet and kube-proxy would have no credentials and no CA for it"
                ),
                "set cluster.kubeconfig to a kubeconfig with embedded credentials (client-certificate-data/client-key-data or a token, and certificate-authority-data)",
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EMBEDDED: &str = "\
apiVersion: v1
kind: Config
clusters:
- name: c
  cluster:
    server: https://10.0.0.10:6443
    certificate-authority-data: Q0E=
users:
- name: u
  user:
    client-certificate-data: Q0VSVA==
    client-key-data: S0VZ
contexts:
- name: ctx
  context: { cluster: c, user: u }
current-context: ctx
";

    #[test]
    fn an_embedded_kubeconfig_passes() {
        assert_eq!(check(EMBEDDED, true), vec![]);
    }

    #[test]
    fn file_references_are_named_with_line_and_fix() {
        let kc = EMBEDDED
            .replace(
                "certificate-authority-data: Q0E=",
                "certificate-authority: /etc/kubernetes/pki/ca.crt",
            )
            .replace(
                "client-certificate-data: Q0VSVA==",
                "client-certificate: /var/lib/kubelet/pki/kubelet-client-current.pem",
            );
        let p = check(&kc, true);
        assert_eq!(p.len(), 2, "{p:?}");
        assert_eq!((p[0].line, p[0].column), (7, 28), "{p:?}");
        assert!(
            p[0].message.contains(
                "certificate-authority refers to the file \"/etc/kubernetes/pki/ca.crt\""
            )
        );
        assert!(p[0].hint.contains("certificate-authority-data"));
        assert!(p[0].hint.contains("kubectl config view --flatten"));
        assert_eq!(p[1].line, 11);
        assert!(p[1].message.contains("users[0].user.client-certificate"));
    }

    #[test]
    fn plugins_missing_credentials_and_garbage() {
        let kc = EMBEDDED.replace(
            "    client-certificate-data: Q0VSVA==\n    client-key-data: S0VZ\n",
            "    exec: { command: aws-iam-authenticator }\n",
        );
        let p = check(&kc, true);
        assert_eq!(p.len(), 1, "{p:?}");
        assert!(p[0].message.contains("users[0].user.exec"), "{p:?}");
        let kc = EMBEDDED.replace(
            "    client-certificate-data: Q0VSVA==\n    client-key-data: S0VZ\n",
            "    {}\n",
        );
        let p = check(&kc, true);
        assert!(p[0].message.contains("no credentials"), "{p:?}");
        assert_eq!(check(&kc, false), vec![]);
        assert!(
            check("clusters: [\n", true)[0]
                .message
                .starts_with("not a kubeconfig")
        );
        assert!(
            check("kind: Config\n", true)[0]
                .message
                .contains("no clusters")
        );
    }
}
