//! `up`: readiness after the change. The control plane's own probe lists
//! the nodes while the Windows hosts are still changing, so a kubelet this
//! run (re)started was judged from a view taken before it ran — `up` failed
//! "not Ready" and `verify` a second later passed. A kubelet also reports
//! Ready only once its runtime and network are up and its next status
//! update is posted (docs/research/kubernetes.md#k9).
//!
//! So the control plane waits until the Windows hosts that change in this
//! run are done, then asks its kubectl again, every [`POLL`], until each of
//! them is listed Ready at the declared release or [`ready_wait`] has
//! passed; the view it ends with is the one the nodes are judged by
//! (`cluster.rs`), which names a node still starting as such.

use std::collections::BTreeSet;
use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use super::coordinate::Ticket;
use super::{Ctx, step};
use crate::alloc::Node;
use crate::inventory::Os;
use crate::os::NodeOps;
use crate::outcome::HostReport;
use crate::transport::Session;
use crate::verify::{K8sNode, K8sView};

/// How long `up` waits by default for the nodes it changed to report Ready.
pub const READY_WAIT: u64 = 120;
/// How often it asks kubectl again meanwhile.
const POLL: Duration = Duration::from_secs(2);

/// The bound on the wait: `KWINCTL_READY_WAIT` seconds (0 to 3600: 0 asks
/// once, without waiting), else [`READY_WAIT`].
pub fn ready_wait() -> Duration {
    Duration::from_secs(
        std::env::var("KWINCTL_READY_WAIT")
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .filter(|s| *s <= 3600)
            .unwrap_or(READY_WAIT),
    )
}

/// The release the inventory declares for the Windows nodes' kubelet, as
/// the control plane's kubectl reports a node's (`1.34.2`).
pub(super) fn declared_release(ctx: &Ctx) -> Option<String> {
    ctx.cluster
        .inventory
        .cluster
        .kubernetes_version
        .map(|v| v.to_string())
}

/// Whether kubectl lists the node `name` (or at `address`) Ready at
/// `version`.
pub(super) fn settled(
    nodes: &[K8sNode],
    name: &str,
    address: Ipv4Addr,
    version: Option<&str>,
) -> bool {
    let address = address.to_string();
    nodes.iter().any(|n| {
        (n.name.eq_ignore_ascii_case(&address) || n.name.eq_ignore_ascii_case(name))
            && n.ready
            && version.is_none_or(|v| n.at_version(v))
    })
}

/// A control plane's report `r` (its view of the nodes in `r.k8s`), with
/// the view taken again once the Windows hosts changing in this run are
/// done and Ready (or the wait is over: `r.k8s_waited` says how long).
pub(super) async fn settle<O: NodeOps>(
    ctx: &Ctx,
    s: &mut Box<dyn Session>,
    node: &Node,
    ops: &O,
    ticket: &Ticket<'_>,
    mut r: HostReport,
) -> HostReport {
    if !matches!(r.k8s, K8sView::Nodes(_)) {
        return r;
    }
    let changing = ticket.changing();
    let windows: Vec<(String, Ipv4Addr)> = ctx
        .cluster
        .inventory
        .hosts
        .iter()
        .filter(|h| h.os == Os::Windows && changing.contains(&h.name.to_ascii_lowercase()))
        .map(|h| (h.name.clone(), h.address))
        .collect();
    if windows.is_empty() {
        return r;
    }
    let names: BTreeSet<String> = windows
        .iter()
        .map(|(n, _)| n.to_ascii_lowercase())
        .collect();
    ctx.reporter.phase(
        &node.name,
        &format!(
            "waiting for {} changing Windows node(s) to finish, to ask kubectl again",
            names.len()
        ),
    );
    ticket.wait_done(&names).await;
    // a host that failed says why itself
    let failed = ticket.failed_hosts();
    let want: Vec<(String, Ipv4Addr)> = windows
        .into_iter()
        .filter(|(n, _)| !failed.contains(&n.to_ascii_lowercase()))
        .collect();
    if want.is_empty() {
        return r;
    }
    let version = declared_release(ctx);
    let bound = ready_wait();
    let start = Instant::now();
    // (the probe lists the nodes only along with pings: it pings these)
    let addresses: Vec<Ipv4Addr> = want.iter().map(|(_, a)| *a).collect();
    loop {
        if let Ok(facts) = step::probe(ctx, s, &node.name, ops, &addresses).await {
            r.k8s = ops.k8s(&facts);
        }
        let K8sView::Nodes(nodes) = &r.k8s else {
            break;
        };
        let waiting: Vec<&str> = want
            .iter()
            .filter(|(n, a)| !settled(nodes, n, *a, version.as_deref()))
            .map(|(n, _)| n.as_str())
            .collect();
        if waiting.is_empty() || ctx.interrupt.is_set() || start.elapsed() + POLL > bound {
            break;
        }
        ctx.reporter.phase(
            &node.name,
            &format!(
                "waiting for {} to report Ready ({}s of at most {}s)",
                waiting.join(", "),
                start.elapsed().as_secs(),
                bound.as_secs()
            ),
        );
        tokio::select! {
            _ = tokio::time::sleep(POLL) => {}
            _ = ctx.interrupt.wait() => break,
        }
    }
    r.k8s_waited = Some(start.elapsed().as_secs());
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, ready: bool, version: Option<&str>) -> K8sNode {
        K8sNode {
            name: name.into(),
            ready,
            os: "windows".into(),
            windows_build: None,
            pod_cidr: None,
            kubelet_version: version.map(str::to_string),
        }
    }

    #[test]
    fn a_node_is_settled_when_listed_ready_at_the_declared_release() {
        let a: Ipv4Addr = "10.0.0.11".parse().unwrap();
        let v = Some("1.30.4");
        assert!(settled(
            &[node("10.0.0.11", true, Some("v1.30.4"))],
            "win1",
            a,
            v
        ));
        assert!(settled(
            &[node("WIN1", true, Some("v1.30.4"))],
            "win1",
            a,
            v
        ));
        // not Ready, another release, or not listed: not yet
        assert!(!settled(
            &[node("10.0.0.11", false, Some("v1.30.4"))],
            "win1",
            a,
            v
        ));
        assert!(!settled(
            &[node("10.0.0.11", true, Some("v1.30.3"))],
            "win1",
            a,
            v
        ));
        assert!(!settled(
            &[node("10.0.0.11", true, Some("v1.30.41"))],
            "win1",
            a,
            v
        ));
        assert!(!settled(
            &[node("win2", true, Some("v1.30.4"))],
            "win1",
            a,
            v
        ));
        // a version not read (an older probe's line) does not hold it up
        assert!(settled(&[node("10.0.0.11", true, None)], "win1", a, v));
        assert!(settled(
            &[node("10.0.0.11", true, Some("v1.30.4"))],
            "win1",
            a,
            None
        ));
    }
}
