//! `up` on a Windows node with nothing left to upgrade that an earlier
//! run left cordoned with kwinctl's mark (`upgrade::drain::MARK`: a run
//! that failed, or was stopped or killed, after its drain): the node is
//! waited for until Ready at the declared release (bounded), checked with
//! `--verify-pods`, and uncordoned (`run/upgrade.rs` is the upgrade itself;
//! the node's pod check, `node_pods`, serves both).

use std::time::{Duration, Instant};

use super::{Ctx, step};
use crate::alloc::Node;
use crate::inventory::{Host, KubeVersion, Os, Role};
use crate::outcome::HostError;
use crate::transport::{Interpreter, Session, Trace};
use crate::upgrade::drain;

/// How often the node's readiness is asked after the change.
const POLL: Duration = Duration::from_secs(2);

/// A node with nothing to upgrade that an earlier run left cordoned (its
/// mark, `drain::MARK`: a run that failed, or was stopped, after the
/// drain): Ready at the declared release (and with `--verify-pods` its
/// test pod passing), it is uncordoned and its mark removed; a mark on a
/// node that takes pods is removed. Nothing is said when the control
/// plane's kubectl does not answer (the next run asks again). `Err`: its
/// pod check failed, the node stays cordoned.
pub(super) async fn resume(
    ctx: &Ctx,
    host: &Host,
    node_of: &Node,
    notes: &mut Vec<String>,
) -> Result<(), HostError> {
    let Some(cp_host) = ctx
        .cluster
        .inventory
        .hosts
        .iter()
        .find(|h| h.os == Os::Linux && h.role == Role::ControlPlane)
    else {
        return Ok(());
    };
    let Ok(mut cp) = step::connect(ctx, cp_host, Interpreter::Sh, &Trace::new()).await else {
        return Ok(());
    };
    let to = ctx.cluster.inventory.cluster.kubernetes_version;
    let at = |v: &str| {
        KubeVersion::of_git_version(v).is_some_and(|v| to.is_none_or(|to| to.accepts(&v)))
    };
    let mut out = Ok(());
    if let Ok(listed) = drain::nodes(&mut *cp, ctx.opts.timeout).await
        && let Some(row) = row_of(host, &listed).filter(|r| r.marked)
    {
        let node = row.name.clone();
        // a run stopped while the node's new kubelet was coming up: wait
        // for it here (bounded, as `after` does)
        let row = match row.cordoned && !(row.ready && at(&row.version)) {
            true => {
                let waiting = format!(
                    "upgrade: waiting for node {node}, which an earlier run left cordoned, to report Ready"
                );
                ready_row(ctx, host, &mut *cp, &node, &at, &waiting)
                    .await
                    .unwrap_or(row.clone())
            }
            false => row.clone(),
        };
        let ready = row.ready && at(&row.version);
        let checked = match row.cordoned && ready && ctx.opts.upgrade_pods {
            true => {
                ctx.reporter.phase(
                    &host.name,
                    &format!("upgrade: checking a test pod on node {node} (--verify-pods)"),
                );
                node_pods(ctx, host, node_of, &mut *cp).await
            }
            false => Ok(()),
        };
        if let Err(why) = checked {
            out = Err(HostError::Upgrade(format!(
                "node {node}, which an earlier run left cordoned, is Ready at {} but failed its pod check (--verify-pods): {why}; it stays cordoned: fix the cause and run `up --verify-pods` again (or `kubectl uncordon {node}` to take pods anyway)",
                row.version
            )));
        } else if !row.cordoned || ready {
            ctx.reporter
                .phase(&host.name, &format!("upgrade: uncordon node {node}"));
            notes.push(match drain::release(&mut *cp, &node, ctx.opts.timeout).await {
                Ok(()) if row.cordoned => format!(
                    "upgrade finished: node {node}, which an earlier run left cordoned, is Ready at {} and was uncordoned",
                    row.version
                ),
                Ok(()) => format!("node {node}: an earlier run's upgrade mark was removed"),
                Err(e) => format!(
                    "node {node}, which an earlier run left cordoned, could not be uncordoned ({e}): `kubectl uncordon {node}`"
                ),
            });
        } else {
            out = Err(HostError::Upgrade(format!(
                "node {node} is still cordoned by an earlier run's upgrade: it did not report Ready at the declared release within {}s (see the kubelet's log on the host); `up` again uncordons it once it is",
                super::settle::ready_wait().as_secs()
            )));
        }
    }
    cp.close().await;
    out
}

/// Wait (bounded by the Ready wait, ended by an interrupt) until `node` is
/// Ready at a release `at` takes: its row then, else `None`. `waiting`
/// says what is awaited, in the host's progress line.
pub(super) async fn ready_row(
    ctx: &Ctx,
    host: &Host,
    cp: &mut dyn Session,
    node: &str,
    at: &(dyn Fn(&str) -> bool + Sync),
    waiting: &str,
) -> Option<drain::Row> {
    let bound = super::settle::ready_wait();
    let start = Instant::now();
    loop {
        if let Ok(list) = drain::nodes(cp, ctx.opts.timeout).await
            && let Some(n) = list
                .into_iter()
                .find(|n| n.name == node && n.ready && at(&n.version))
        {
            return Some(n);
        }
        if ctx.interrupt.is_set() || start.elapsed() + POLL > bound {
            return None;
        }
        ctx.reporter.phase(
            &host.name,
            &format!(
                "{waiting} ({}s of at most {}s)",
                start.elapsed().as_secs(),
                bound.as_secs()
            ),
        );
        tokio::select! {
            _ = tokio::time::sleep(POLL) => {}
            _ = ctx.interrupt.wait() => {}
        }
    }
}

/// `--verify-pods` on the upgraded node (`upgrade/pods.rs`): `Err` says
/// why it failed.
pub(super) async fn node_pods(
    ctx: &Ctx,
    host: &Host,
    node: &Node,
    cp: &mut dyn Session,
) -> Result<(), String> {
    let cl = &ctx.cluster.inventory.cluster;
    let subject = crate::podcheck::Subject {
        host: host.name.clone(),
        node: host.node_name(),
        os: node.os,
        address: node.address,
        pod_cidr: node.pod_cidr,
        host_dns: node.os == Os::Windows
            && cl.windows_profile() == Some(crate::inventory::WindowsProfile::Transparent),
    };
    let options = crate::podcheck::Options {
        namespace: cl.pod_check.namespace.clone(),
        images: cl.pod_check.images.clone(),
        domain: cl.dns_domain.clone(),
        start_timeout: cl.pod_check.start_timeout,
        call_timeout: ctx.opts.timeout,
    };
    let stop = || ctx.interrupt.is_set();
    let say = |s: &str| ctx.reporter.phase(&host.name, s);
    crate::upgrade::pods::check(cp, &subject, &options, &stop, &say).await
}

/// The node kubectl lists for `host`: by its address, else its name.
pub(super) fn row_of<'a>(host: &Host, listed: &'a [drain::Row]) -> Option<&'a drain::Row> {
    let address = host.address.to_string();
    listed
        .iter()
        .find(|n| n.name.eq_ignore_ascii_case(&address))
        .or_else(|| {
            listed
                .iter()
                .find(|n| n.name.eq_ignore_ascii_case(&host.name))
        })
}
