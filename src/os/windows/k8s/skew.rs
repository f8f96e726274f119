//! The version skew policy as rows of the release table (`k8s.yaml`'s
//! `skew`, with their sources): how far the kubelet and kube-proxy kwinctl
//! installs may be from kube-apiserver (docs/research/upgrade.md#u8).

use serde::Deserialize;

use super::{Component, TABLE, covers};
use crate::inventory::Minor;

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SkewRow {
    pub component: Component,
    pub since: String,
    pub until: Option<String>,
    /// How many minor releases the component may be behind kube-apiserver.
    pub older: u32,
    /// How many ahead of it.
    pub newer: u32,
    pub source: String,
}

/// The row for `c` at release `m`, if the table has one.
fn row(c: Component, m: Minor) -> Option<&'static SkewRow> {
    TABLE
        .skew
        .iter()
        .find(|r| r.component == c && covers(&r.since, r.until.as_deref(), m))
}

/// Why `c` of release `node` may not run against kube-apiserver `api`
/// (`None`: the policy allows it, or the table has no row for `node`).
pub fn skew_refusal(c: Component, node: Minor, api: Minor) -> Option<String> {
    let r = row(c, node)?;
    let name = c.name();
    if node.major != api.major {
        return Some(format!(
            "{name} {node} and kube-apiserver {api} are of different major releases"
        ));
    }
    if node.minor > api.minor + r.newer {
        return Some(format!(
            "{name} {node} would be newer than kube-apiserver {api}; the version skew policy \
             allows a {name} no newer than the API server: upgrade the control plane first, or \
             declare kubernetes_version {api}.x"
        ));
    }
    if api.minor > node.minor + r.older {
        let oldest = Minor::new(api.major, api.minor - r.older);
        return Some(format!(
            "{name} {node} would be {} minor releases older than kube-apiserver {api}; the version \
             skew policy allows {} for a {name} {node}: declare kubernetes_version {oldest} or newer",
            api.minor - node.minor,
            r.older
        ));
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(s: &str) -> Minor {
        Minor::parse(s).unwrap()
    }

    #[test]
    fn a_node_newer_than_the_api_server_is_refused() {
        for c in [Component::Kubelet, Component::KubeProxy] {
            let why = skew_refusal(c, m("1.31"), m("1.30")).unwrap();
            assert!(why.contains("newer than kube-apiserver 1.30"), "{why}");
            assert!(why.contains("upgrade the control plane first"), "{why}");
            assert_eq!(skew_refusal(c, m("1.30"), m("1.30")), None);
        }
    }

    #[test]
    fn three_minors_older_from_1_25_two_before() {
        let k = Component::Kubelet;
        assert_eq!(skew_refusal(k, m("1.28"), m("1.31")), None);
        let why = skew_refusal(k, m("1.27"), m("1.31")).unwrap();
        assert!(why.contains("4 minor releases older"), "{why}");
        assert!(why.contains("kubernetes_version 1.28 or newer"), "{why}");
        // the page: "kubelet < 1.25 may only be up to two minor versions older"
        assert_eq!(skew_refusal(k, m("1.25"), m("1.28")), None);
        assert!(skew_refusal(k, m("1.24"), m("1.27")).is_some());
        assert_eq!(skew_refusal(k, m("1.24"), m("1.26")), None);
        assert!(skew_refusal(Component::KubeProxy, m("1.24"), m("1.27")).is_some());
    }

    #[test]
    fn every_row_cites_the_policy() {
        for r in &TABLE.skew {
            assert!(r.source.contains("docs/research/upgrade.md#u8"), "{r:?}");
            assert_eq!(r.newer, 0, "{r:?}");
        }
    }
}
