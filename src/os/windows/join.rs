//! A joining Windows node's scripts (issue 35, src/join/): before the
//! converge, the bootstrap kubeconfig placed and a credential that is not
//! the node's own removed (its kubelet would otherwise keep using it, as
//! the kubelet's bootstrap skips a kubeconfig whose certificate is still
//! valid: docs/research/bootstrap.md#bt-kubelet); after it, the kubelet
//! bootstrapped and the bootstrap kubeconfig removed, as `kubeadm join`
//! does (docs/research/bootstrap.md#bt-join).

use super::action::WinAction;
use super::facts::WindowsFacts;
use super::files::{FileSource, WinFile};
use super::{WindowsDesired, WindowsOps};
use crate::alloc::Node;
use crate::diff::Item;
use crate::identity::cert::{CERT_DIR, CURRENT};
use crate::inventory::Identity;
use crate::os::NodeOps;

/// The kubelet's client certificate, as the probe reads it.
pub const CLIENT_CERT: &str = CURRENT;
/// Where the shared kubeconfig goes (`cluster.identity: shared`; a
/// secret: run records name it, never show it).
pub const KUBECONFIG: &str = r"C:\k\config";
/// The kubelet's own kubeconfig in bootstrap mode (`--kubeconfig`): the
/// kubelet writes it after TLS bootstrapping, naming its certificate
/// (docs/research/bootstrap.md#bt-kubelet).
pub const KUBELET_CONF: &str = r"C:\k\kubelet.conf";
/// The bootstrap kubeconfig (`--bootstrap-kubeconfig`): there only while a
/// node joins, as `kubeadm join` does (docs/research/bootstrap.md#bt-join).
pub const BOOTSTRAP_CONF: &str = r"C:\k\bootstrap-kubelet.conf";
/// kube-proxy's own kubeconfig in bootstrap mode (its `--kubeconfig`): a
/// ServiceAccount token of its own per node, as kubeadm's kube-proxy has
/// (docs/research/bootstrap.md#bt-proxy). A secret: run records name it,
/// never show it.
pub const KUBE_PROXY_CONF: &str = r"C:\k\kube-proxy.conf";

/// Why the node must join (bootstrap mode only): see
/// [`crate::identity::cert::needs_join`].
pub fn must_join(
    d: &WindowsDesired,
    f: &WindowsFacts,
    ca: Option<&crate::identity::issuer::Anchor>,
) -> Option<String> {
    if d.identity != Identity::Bootstrap {
        return None;
    }
    let now = std::time::SystemTime::now();
    crate::identity::cert::needs_join(f.kubelet_client.as_ref(), &d.node_name, ca, now)
}

/// verify's check of the node's own certificate, when it has one (see
/// [`crate::identity::cert::check`]).
pub fn identity(
    d: &WindowsDesired,
    node: &Node,
    f: &WindowsFacts,
    ca: Option<&crate::identity::issuer::Anchor>,
) -> Option<crate::verify::Check> {
    let now = std::time::SystemTime::now();
    let c = f.kubelet_client.as_ref();
    crate::identity::cert::check(&node.name, &d.node_name, c, ca, now, d.cert_margin)
}

/// How long the kubelet may take to get its certificate: its request is
/// approved by the controller manager within seconds when the bindings are
/// in place; a pending one never is (B: kwinctl's bound).
pub const WAIT_SECONDS: u32 = 300;

/// The actions of a join: (before the converge, after it).
pub fn actions(conf: &[u8]) -> (Vec<WinAction>, Vec<WinAction>) {
    let place = WinAction::PlaceFile {
        file: WinFile {
            path: BOOTSTRAP_CONF.into(),
            sha256: crate::hash::sha256_bytes(conf),
            source: FileSource::Inline(conf.to_vec().into()),
            version: None,
            version_regex: None,
        },
    };
    let before = vec![
        place,
        WinAction::RemoveFile {
            path: CURRENT.into(),
        },
        WinAction::RemoveFile {
            path: KUBELET_CONF.into(),
        },
    ];
    let after = vec![WinAction::FinishJoin {
        cert: CURRENT.into(),
        bootstrap: BOOTSTRAP_CONF.into(),
        stale: vec![KUBECONFIG.into()],
        seconds: WAIT_SECONDS,
    }];
    (before, after)
}

/// The node's credentials, whichever identity it had: what the probe
/// looks for (files, folders) and `reset` removes.
pub const CREDENTIAL_FILES: [&str; 3] = [KUBELET_CONF, BOOTSTRAP_CONF, KUBE_PROXY_CONF];

/// `reset`: the node's own credentials go (its kubelet's kubeconfig, a
/// bootstrap kubeconfig left by a failed join, kube-proxy's kubeconfig, its
/// certificate directory);
/// the shared `C:\k\config` is a desired file and goes with the others.
pub fn reset_items(f: &WindowsFacts) -> Vec<Item<WinAction>> {
    let mut items: Vec<Item<WinAction>> = CREDENTIAL_FILES
        .iter()
        .map(|p| Item {
            key: format!("file {p}"),
            action: f
                .files
                .iter()
                .any(|x| x.path.eq_ignore_ascii_case(p))
                .then(|| WinAction::RemoveFile { path: (*p).into() }),
        })
        .collect();
    items.push(Item {
        key: format!("folder {CERT_DIR}"),
        action: f
            .folders
            .iter()
            .any(|x| x.eq_ignore_ascii_case(CERT_DIR))
            .then(|| WinAction::RemoveFolder {
                path: CERT_DIR.into(),
            }),
    });
    items
}

/// The node whose kube-proxy gets a credential of its own (bootstrap mode
/// only), by its node name in lower case.
pub fn proxy_node(d: &WindowsDesired) -> Option<String> {
    (d.identity == Identity::Bootstrap).then(|| d.node_name.to_ascii_lowercase())
}

/// kube-proxy's kubeconfig `conf` placed when the node does not hold
/// exactly it (bootstrap mode only): `None` when nothing is to change.
pub fn proxy_script(
    ops: &WindowsOps,
    node: &Node,
    f: &WindowsFacts,
    conf: &[u8],
) -> Option<String> {
    let place = proxy_action(&ops.desired.identity, f, conf)?;
    let mut actions = vec![place];
    actions.extend(proxy_restart(&ops.desired.services, f));
    let refs: Vec<&WinAction> = actions.iter().collect();
    Some(ops.script(node, &refs, None))
}

/// kube-proxy reinstalled (and so restarted when it runs) when it already
/// had a kubeconfig of its own: it reads its kubeconfig only at start, and
/// a new token (its Secret made anew) must reach it. A node without one
/// gets kube-proxy's new command line from the converge.
fn proxy_restart(services: &[super::service::WinService], f: &WindowsFacts) -> Option<WinAction> {
    let had = f
        .files
        .iter()
        .any(|x| x.path.eq_ignore_ascii_case(KUBE_PROXY_CONF));
    let s = services.iter().find(|s| s.name == "kube-proxy")?;
    let name = |n: &str| n.eq_ignore_ascii_case(&s.name);
    let service = f.services.iter().any(|x| name(&x.name));
    let task = f.tasks.iter().any(|x| name(&x.name));
    if !had {
        return None;
    }
    match s.hosting {
        super::k8s::Hosting::Service if service => Some(WinAction::InstallService {
            service: s.clone(),
            exists: true,
        }),
        super::k8s::Hosting::Task if task => Some(WinAction::InstallTask {
            service: s.clone(),
            exists: true,
        }),
        _ => None,
    }
}

/// The action placing kube-proxy's kubeconfig, if it is needed.
fn proxy_action(identity: &Identity, f: &WindowsFacts, conf: &[u8]) -> Option<WinAction> {
    if *identity != Identity::Bootstrap {
        return None;
    }
    let sha256 = crate::hash::sha256_bytes(conf);
    let held = f.files.iter().any(|x| {
        x.path.eq_ignore_ascii_case(KUBE_PROXY_CONF) && x.sha256.eq_ignore_ascii_case(&sha256)
    });
    (!held).then(|| WinAction::PlaceFile {
        file: WinFile {
            path: KUBE_PROXY_CONF.into(),
            sha256,
            source: FileSource::Inline(conf.to_vec().into()),
            version: None,
            version_regex: None,
        },
    })
}

/// The join's scripts (bootstrap mode only).
pub fn scripts(ops: &WindowsOps, node: &Node, conf: &[u8]) -> Option<(String, String)> {
    if ops.desired.identity != Identity::Bootstrap {
        return None;
    }
    let (before, after) = actions(conf);
    let b: Vec<&WinAction> = before.iter().collect();
    let a: Vec<&WinAction> = after.iter().collect();
    Some((ops.script(node, &b, None), ops.script(node, &a, None)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_join_places_the_token_file_and_removes_it_after() {
        let (before, after) = actions(b"{}");
        assert!(matches!(&before[0], WinAction::PlaceFile { file } if file.path == BOOTSTRAP_CONF));
        assert!(before.contains(&WinAction::RemoveFile {
            path: CURRENT.into()
        }));
        assert!(
            matches!(&after[0], WinAction::FinishJoin { bootstrap, stale, .. }
            if bootstrap == BOOTSTRAP_CONF && stale == &[KUBECONFIG.to_string()])
        );
    }

    #[test]
    fn kube_proxys_kubeconfig_is_placed_only_when_it_differs() {
        let mut f = crate::os::windows::fixtures::fresh();
        let conf = b"{\"kind\": \"Config\"}\n";
        let placed = proxy_action(&Identity::Bootstrap, &f, conf);
        assert!(
            matches!(&placed, Some(WinAction::PlaceFile { file }) if file.path == KUBE_PROXY_CONF)
        );
        assert!(proxy_action(&Identity::Shared, &f, conf).is_none());
        f.files.push(crate::os::windows::facts::FileFact {
            path: r"c:\k\kube-proxy.conf".into(),
            sha256: crate::hash::sha256_bytes(conf).to_ascii_uppercase(),
        });
        assert!(proxy_action(&Identity::Bootstrap, &f, conf).is_none());
        assert!(proxy_action(&Identity::Bootstrap, &f, b"other").is_some());
        // reset removes it
        assert!(reset_items(&f).iter().any(|i| i.action
            == Some(WinAction::RemoveFile {
                path: KUBE_PROXY_CONF.into()
            })));
    }

    #[test]
    fn a_new_kube_proxy_kubeconfig_restarts_a_kube_proxy_that_had_one() {
        let d = crate::os::windows::fixtures::desired("l2bridge", "", "win01");
        let mut f = crate::os::windows::fixtures::l2bridge_converged();
        f.files
            .retain(|x| !x.path.eq_ignore_ascii_case(KUBE_PROXY_CONF));
        // none before: the converge installs kube-proxy with its flag
        assert!(proxy_restart(&d.services, &f).is_none());
        f.files.push(crate::os::windows::facts::FileFact {
            path: KUBE_PROXY_CONF.into(),
            sha256: "00".into(),
        });
        let r = proxy_restart(&d.services, &f);
        assert!(
            matches!(&r, Some(WinAction::InstallService { service, exists: true }
                | WinAction::InstallTask { service, exists: true }) if service.name == "kube-proxy"),
            "{r:?}"
        );
    }

    #[test]
    fn reset_removes_the_credentials_present() {
        let mut f = crate::os::windows::fixtures::fresh();
        assert!(reset_items(&f).iter().all(|i| i.action.is_none()));
        f.folders.push(r"c:\k\pki".into());
        f.files = crate::os::windows::fixtures::fresh().files;
        let acts: Vec<WinAction> = reset_items(&f)
            .into_iter()
            .filter_map(|i| i.action)
            .collect();
        assert_eq!(
            acts,
            [WinAction::RemoveFolder {
                path: CERT_DIR.into()
            }]
        );
    }

    #[test]
    fn the_table_names_the_same_files() {
        let flags: Vec<_> = super::super::k8s::TABLE
            .flags
            .iter()
            .filter(|r| r.when == super::super::k8s::When::Bootstrap)
            .map(|r| (r.name.as_str(), r.value.clone().unwrap_or_default()))
            .collect();
        assert!(flags.contains(&("--bootstrap-kubeconfig", BOOTSTRAP_CONF.to_string())));
        assert!(flags.contains(&("--cert-dir", crate::identity::cert::CERT_DIR.to_string())));
        assert!(flags.iter().any(|(n, _)| *n == "--rotate-certificates"));
    }
}
