//! The version skew policy, before anything changes: the kubelet and
//! kube-proxy `up` would install on the Windows hosts that change, against
//! kube-apiserver's release as the control plane's kubectl reports it in
//! its first probe (docs/research/upgrade.md#u1, #u8). A kubelet newer than
//! the API server, or older than the policy allows, is refused; so is a
//! downgrade of a running kubelet, unless `--allow-downgrade`.

use std::net::Ipv4Addr;

use crate::inventory::KubeVersion;
use crate::os::windows::k8s::{Component, skew_refusal};
use crate::verify::K8sNode;

/// What the control plane's first probe said: kube-apiserver's release
/// (`None`: not read) and the nodes kubectl listed.
#[derive(Debug, Clone, Default)]
pub struct ControlView {
    pub api_server: Option<KubeVersion>,
    pub nodes: Vec<K8sNode>,
}

/// The policy's verdict on a run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Judged {
    Allowed,
    /// Not checked: why (a note; the run goes on).
    NotChecked(String),
    /// Refused: why, and what to do.
    Refused(String),
}

/// The node kubectl lists for the host `name` at `address` (kwinctl names
/// a Windows node by its address, `--hostname-override`).
pub fn node_of<'a>(nodes: &'a [K8sNode], name: &str, address: Ipv4Addr) -> Option<&'a K8sNode> {
    let address = address.to_string();
    nodes
        .iter()
        .find(|n| n.name.eq_ignore_ascii_case(&address) || n.name.eq_ignore_ascii_case(name))
}

/// Whether running `from` and declaring `to` is a downgrade (a declared
/// `1.30` accepts every 1.30.x).
pub fn downgrade(from: KubeVersion, to: KubeVersion) -> bool {
    from.minor > to.minor
        || (from.minor == to.minor && to.patch.is_some_and(|p| from.patch.unwrap_or(0) > p))
}

/// The verdict on installing the `declared` release on the Windows hosts
/// `changing` (name, address), given the control plane's `view`.
pub fn judge(
    declared: Option<KubeVersion>,
    view: Option<&ControlView>,
    changing: &[(String, Ipv4Addr)],
    allow_downgrade: bool,
) -> Judged {
    let Some(declared) = declared else {
        return Judged::Allowed;
    };
    if changing.is_empty() {
        return Judged::Allowed;
    }
    let Some(view) = view else {
        return Judged::NotChecked(
            "the control plane's kubectl did not list the nodes in this run (no control plane \
             selected, or no kubectl there): the Windows nodes' release was not checked against \
             kube-apiserver's (the version skew policy)"
                .into(),
        );
    };
    let Some(api) = view.api_server else {
        return Judged::NotChecked(
            "the control plane's kubectl did not report kube-apiserver's release (`kubectl \
             version`): the Windows nodes' release was not checked against it (the version skew \
             policy)"
                .into(),
        );
    };
    for c in [Component::Kubelet, Component::KubeProxy] {
        if let Some(why) = skew_refusal(c, declared.minor, api.minor) {
            return Judged::Refused(format!(
                "kubernetes_version {declared} against kube-apiserver {api}: {why}"
            ));
        }
    }
    if allow_downgrade {
        return Judged::Allowed;
    }
    let down: Vec<String> = changing
        .iter()
        .filter_map(|(name, address)| {
            let n = node_of(&view.nodes, name, *address)?;
            let running = KubeVersion::of_git_version(n.kubelet_version.as_deref()?)?;
            downgrade(running, declared).then(|| format!("{name} runs kubelet {running}"))
        })
        .collect();
    if down.is_empty() {
        return Judged::Allowed;
    }
    Judged::Refused(format!(
        "{} and the inventory declares kubernetes_version {declared}: that is a downgrade, which \
         kwinctl makes only when asked: rerun with --allow-downgrade, or declare the running release",
        down.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> KubeVersion {
        KubeVersion::parse(s).unwrap()
    }

    fn node(name: &str, version: &str) -> K8sNode {
        K8sNode {
            name: name.into(),
            ready: true,
            os: "windows".into(),
            windows_build: None,
            pod_cidr: None,
            kubelet_version: Some(version.into()),
        }
    }

    fn view(api: &str, nodes: Vec<K8sNode>) -> ControlView {
        ControlView {
            api_server: Some(v(api)),
            nodes,
        }
    }

    fn win1() -> Vec<(String, Ipv4Addr)> {
        vec![("win1".into(), "198.18.5.4".parse().unwrap())]
    }

    #[test]
    fn a_kubelet_newer_than_the_api_server_is_refused() {
        let cp = view("1.30.4", vec![node("198.18.5.4", "v1.30.4")]);
        let Judged::Refused(why) = judge(Some(v("1.31.2")), Some(&cp), &win1(), false) else {
            panic!("not refused");
        };
        assert!(why.starts_with("kubernetes_version 1.31.2 against kube-apiserver 1.30.4: kubelet 1.31 would be newer"), "{why}");
        // not even with --allow-downgrade
        assert!(matches!(
            judge(Some(v("1.31.2")), Some(&cp), &win1(), true),
            Judged::Refused(_)
        ));
        // the same minor, a newer patch: the policy counts minors
        assert_eq!(
            judge(Some(v("1.30.9")), Some(&cp), &win1(), false),
            Judged::Allowed
        );
    }

    #[test]
    fn an_upgrade_within_the_policy_is_allowed() {
        let cp = view("1.31.2", vec![node("198.18.5.4", "v1.30.4")]);
        assert_eq!(
            judge(Some(v("1.31.2")), Some(&cp), &win1(), false),
            Judged::Allowed
        );
        // too old for the API server
        let cp = view("1.31.2", vec![]);
        assert!(matches!(
            judge(Some(v("1.27.1")), Some(&cp), &win1(), false),
            Judged::Refused(w) if w.contains("4 minor releases older")
        ));
    }

    #[test]
    fn a_downgrade_needs_the_flag() {
        let cp = view("1.31.2", vec![node("WIN1", "v1.31.2")]);
        let Judged::Refused(why) = judge(Some(v("1.30.4")), Some(&cp), &win1(), false) else {
            panic!("not refused");
        };
        assert!(why.contains("win1 runs kubelet 1.31.2"), "{why}");
        assert!(why.contains("--allow-downgrade"), "{why}");
        assert_eq!(
            judge(Some(v("1.30.4")), Some(&cp), &win1(), true),
            Judged::Allowed
        );
        assert!(downgrade(v("1.30.5"), v("1.30.4")));
        assert!(!downgrade(v("1.30.5"), v("1.30")));
        assert!(!downgrade(v("1.30.4"), v("1.31.0")));
    }

    #[test]
    fn without_the_api_servers_release_it_says_so() {
        assert!(matches!(
            judge(Some(v("1.31.2")), None, &win1(), false),
            Judged::NotChecked(_)
        ));
        let cp = ControlView::default();
        assert!(matches!(
            judge(Some(v("1.31.2")), Some(&cp), &win1(), false),
            Judged::NotChecked(w) if w.contains("kubectl version")
        ));
        // nothing Windows changes: nothing to judge
        assert_eq!(judge(Some(v("1.31.2")), None, &[], false), Judged::Allowed);
    }
}
