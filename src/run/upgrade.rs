//! `up`: the runner's side of an upgrade of a Windows node (the upgrade's
//! steps are `upgrade/drain.rs`'s; `plan`'s words `upgrade/plan.rs`'s). A
//! Windows host whose running kubelet or containerd is of another release
//! than the declared one, with changes to make, is upgraded one node at a
//! time (`--parallel` given raises it):
//! cordon and drain through the control plane's kubectl before anything
//! changes (a drain that cannot finish stops the node, uncordoned, before
//! anything is replaced, naming the pods that blocked it), the change, then
//! the node Ready at the new release, then uncordon. A node whose change or
//! whose new kubelet failed is rolled back to the binaries kept beside the
//! new ones and left cordoned, saying so. The nodes kwinctl cordons carry
//! its mark (`drain::MARK`) until it uncordons them: a later run finishes
//! them, and never uncordons a node someone else cordoned. Without a
//! control plane's kubectl the upgrade goes on without cordon and drain,
//! saying so.

use std::sync::atomic::Ordering;
use std::time::Instant;

use tokio::sync::OwnedSemaphorePermit;

use super::{Ctx, step};
use crate::alloc::Node;
use crate::diff::{Conflict, Diff};
use crate::inventory::{Host, KubeVersion, Os, Role};
use crate::os::NodeOps;
use crate::outcome::{HostError, HostReport, HostStatus};
use crate::transport::{Interpreter, Session, Trace};
use crate::upgrade::drain;

use super::upgrade_resume::{ready_row, row_of};

/// A node being upgraded: the control plane's session, the node's name
/// there, what changes, the kubelet release it must report, its slot.
pub(super) struct Upgrading {
    cp: Box<dyn Session>,
    node: String,
    what: String,
    to: Option<KubeVersion>,
    /// The kubelet's release before the upgrade, when it changes: what a
    /// rollback puts back.
    from: Option<KubeVersion>,
    /// Cordoned by this run or an earlier one's (kwinctl's mark): it is
    /// uncordoned once upgraded; else it stays cordoned, as it was.
    ours: bool,
    _slot: OwnedSemaphorePermit,
}

/// A component whose running release is not the declared one.
struct Change {
    component: &'static str,
    from: String,
    to: String,
    older: bool,
}

/// What the upgrade of `host` changes: the kubelet (with kube-proxy) and
/// containerd, where the running release differs from the declared one.
fn changes<O: NodeOps>(ctx: &Ctx, host: &Host, ops: &O, facts: &O::Facts) -> Vec<Change> {
    let mut out = Vec::new();
    if host.os != Os::Windows {
        return out;
    }
    let cl = &ctx.cluster.inventory.cluster;
    if let (Some(to), Some(from)) = (cl.kubernetes_version, ops.kubelet_release(facts))
        && !to.accepts(&from)
    {
        out.push(Change {
            component: "kubelet",
            from: from.to_string(),
            to: to.to_string(),
            older: crate::upgrade::skew::downgrade(from, to),
        });
    }
    if let (Some(to), Some(from)) = (cl.containerd_version, ops.runtime_release(facts))
        && to != from
    {
        out.push(Change {
            component: "containerd",
            from: from.to_string(),
            to: to.to_string(),
            older: from > to,
        });
    }
    out
}

/// `plan`: a node with changes that is an upgrade says so, per component.
pub(super) fn plan_lines<O: NodeOps>(
    ctx: &Ctx,
    host: &Host,
    ops: &O,
    facts: &O::Facts,
    r: &HostReport,
) -> Vec<String> {
    if r.status != HostStatus::Pending {
        return Vec::new();
    }
    changes(ctx, host, ops, facts)
        .iter()
        .map(|c| crate::upgrade::plan::line(c.component, &c.from, &c.to, c.older))
        .collect()
}

/// Before `up` changes `host`: whether it is an upgrade (its kubelet or
/// containerd), and if so its slot, cordon and drain. `Err`: the host
/// stops, nothing replaced.
#[allow(clippy::too_many_arguments)]
pub(super) async fn before<O: NodeOps>(
    ctx: &Ctx,
    host: &Host,
    node_of: &Node,
    ops: &O,
    facts: &O::Facts,
    work: &Result<Diff<O::Action>, Conflict>,
    refused: bool,
    notes: &mut Vec<String>,
) -> Result<Option<Upgrading>, HostError> {
    let pending = work.as_ref().is_ok_and(|d| d.changes() > 0);
    if refused || ctx.interrupt.is_set() {
        return Ok(None);
    }
    let comps = changes(ctx, host, ops, facts);
    if comps.is_empty() {
        // a node an earlier run left cordoned, now at the declared release
        if ops.kubelet_release(facts).is_some() {
            super::upgrade_resume::resume(ctx, host, node_of, notes).await?;
        }
        return Ok(None);
    }
    if !pending {
        return Ok(None);
    }
    let to = ctx.cluster.inventory.cluster.kubernetes_version;
    let from = comps
        .iter()
        .any(|c| c.component == "kubelet")
        .then(|| ops.kubelet_release(facts))
        .flatten();
    let what = comps
        .iter()
        .map(|c| format!("{} {} → {}", c.component, c.from, c.to))
        .collect::<Vec<_>>()
        .join(", ");
    ctx.reporter
        .phase(&host.name, &format!("upgrade {what}: waiting for its turn"));
    let slot = tokio::select! {
        biased;
        _ = ctx.interrupt.wait() => return Ok(None),
        s = ctx.upgrades.clone().acquire_owned() => s.expect("the upgrade slots stay open"),
    };
    if ctx.max_fail_reached().is_some() || ctx.interrupt.is_set() {
        return Ok(None);
    }
    if ctx.opts.max_fail.is_none() && ctx.upgrades_failed.load(Ordering::SeqCst) > 0 {
        return Err(HostError::Upgrade(format!(
            "upgrade {what} not started: another node's upgrade failed in this run, and upgrades stop at the first failure (--max-fail lets them go on); nothing was changed on it"
        )));
    }
    let Some(cp_host) = ctx
        .cluster
        .inventory
        .hosts
        .iter()
        .find(|h| h.os == Os::Linux && h.role == Role::ControlPlane)
    else {
        notes.push(format!(
            "upgrade {what} without cordon and drain: the inventory has no Linux control-plane host whose kubectl could"
        ));
        return Ok(None);
    };
    let mut cp = step::connect(ctx, cp_host, Interpreter::Sh, &Trace::new())
        .await
        .map_err(|e| {
            HostError::Upgrade(format!(
                "upgrade {what}: the control plane {} did not answer ({e}), so the node could not be drained; nothing was replaced",
                cp_host.name
            ))
        })?;
    let listed = match drain::nodes(&mut *cp, ctx.opts.timeout).await {
        Ok(l) => l,
        Err(why) => {
            cp.close().await;
            notes.push(format!(
                "upgrade {what} without cordon and drain: the control plane's kubectl did not list the nodes ({why})"
            ));
            return Ok(None);
        }
    };
    let Some(row) = row_of(host, &listed) else {
        cp.close().await;
        notes.push(format!(
            "upgrade {what} without cordon and drain: kubectl lists no node with this host's address or name"
        ));
        return Ok(None);
    };
    let node = row.name.clone();
    // cordoned by someone else (no mark of kwinctl's): drained, upgraded,
    // and left cordoned as it was
    let ours = !row.cordoned || row.marked;
    if ours && !row.marked {
        let release = to.map(|t| t.to_string()).unwrap_or_default();
        if let Err(e) = drain::mark(&mut *cp, &node, &release, ctx.opts.timeout).await {
            cp.close().await;
            ctx.upgrade_failed();
            return Err(HostError::Upgrade(format!(
                "upgrade {what} not started: node {node} could not be marked as cordoned by kwinctl ({e}); nothing was changed on it"
            )));
        }
    }
    let timeout = drain::drain_timeout();
    ctx.reporter.phase(
        &host.name,
        &format!(
            "upgrade {what}: cordon and drain node {node} (at most {}s)",
            timeout.as_secs()
        ),
    );
    // Ctrl-C ends the wait for the drain at once and the remote drain with
    // it (its PID kept on the control plane, ended through a session of
    // its own): nothing is replaced, and the node stays cordoned with
    // kwinctl's mark, for a rerun
    let pid_file = drain::drain_pid_file(&node_of.cluster.id, &node);
    // a drain of this node left by a run that died ends first
    if let Err(e) = drain::stop_drain(&mut *cp, &pid_file, ctx.opts.timeout).await {
        notes.push(format!(
            "upgrade {what}: an earlier run's drain of node {node} could not be ended ({e})"
        ));
    }
    let drained = tokio::select! {
        biased;
        _ = ctx.interrupt.wait() => None,
        d = drain::drain(&mut *cp, &node, timeout, &pid_file) => Some(d),
    };
    let Some(drained) = drained else {
        cp.close().await;
        let stopped = match step::connect(ctx, cp_host, Interpreter::Sh, &Trace::new()).await {
            Ok(mut s) => {
                let r = drain::stop_drain(&mut *s, &pid_file, ctx.opts.timeout).await;
                s.close().await;
                r
            }
            Err(e) => Err(format!("the control plane did not answer: {e}")),
        };
        notes.push(format!(
            "upgrade {what} interrupted during the drain: {}; nothing was replaced, and node {node} is left cordoned{}; `up` again drains it again and finishes the upgrade",
            match stopped {
                Ok(()) => "the drain was ended".to_string(),
                Err(e) => format!(
                    "the drain on {} may still run until its bound ({e})",
                    cp_host.name
                ),
            },
            if ours {
                format!(" (marked {})", drain::MARK)
            } else {
                String::new()
            }
        ));
        return Err(HostError::Interrupted { probed: true });
    };
    if let Err(why) = drained {
        // nothing is replaced: the node goes back to taking pods (unless
        // someone else had cordoned it)
        let restored = match ours {
            true => drain::release(&mut *cp, &node, ctx.opts.timeout).await,
            false => Err("it was cordoned before this run".into()),
        };
        cp.close().await;
        ctx.upgrade_failed();
        return Err(HostError::Upgrade(format!(
            "upgrade {what} stopped before anything was replaced: {why}; {}",
            match restored {
                Ok(()) => format!("node {node} was uncordoned"),
                Err(e) => format!("node {node} is left cordoned ({e}): `kubectl uncordon {node}`"),
            }
        )));
    }
    Ok(Some(Upgrading {
        cp,
        node,
        what,
        to,
        from,
        ours,
        _slot: slot,
    }))
}

/// After the change: the node Ready at the new release, then uncordoned.
/// A change or a kubelet that failed is rolled back to the binaries the
/// node ran before (kept beside the new ones, [`NodeOps::rollback_script`])
/// with its services started, and the node left cordoned, said in `r`.
pub(super) async fn after<O: NodeOps>(
    ctx: &Ctx,
    host: &Host,
    session: &mut Box<dyn Session>,
    node_of: &Node,
    ops: &O,
    up: Upgrading,
    mut r: HostReport,
) -> HostReport {
    let Upgrading {
        mut cp,
        node,
        what,
        to,
        from,
        ours,
        ..
    } = up;
    if r.status == HostStatus::Failed || r.status == HostStatus::Interrupted {
        ctx.upgrade_failed();
        cp.close().await;
        let back = match r.status {
            // (an interrupted run changes nothing more: a rerun finishes it)
            HostStatus::Failed => rollback(ctx, session, node_of, ops, from).await,
            _ => None,
        };
        r.notes.push(format!(
            "upgrade {what}: {}node {node} is left cordoned (the change did not finish); fix what failed and run `up` again, which finishes the upgrade and uncordons it",
            back.map(|b| format!("{b}; ")).unwrap_or_default()
        ));
        return r;
    }
    let bound = super::settle::ready_wait();
    let start = Instant::now();
    // (a declared minor, `1.31`, takes any of its patches)
    let at = |v: &str| {
        KubeVersion::of_git_version(v).is_some_and(|v| to.is_none_or(|to| to.accepts(&v)))
    };
    let at_text = to.map(|t| format!(" at {t}")).unwrap_or_default();
    let waiting = format!("upgrade {what}: waiting for node {node} to report Ready{at_text}");
    let ready = ready_row(ctx, host, &mut *cp, &node, &at, &waiting)
        .await
        .is_some();
    if !ready && ctx.interrupt.is_set() {
        // stopped while waiting: the new binaries are in place and their
        // services started (one script swapped them), the node cordoned
        // with kwinctl's mark; a rerun waits for it and uncordons it
        cp.close().await;
        let mut r = r.failed(HostError::Upgrade(format!(
            "upgrade {what} interrupted while waiting for node {node} to report Ready{at_text} ({}s of at most {}s): its new kubelet and kube-proxy are in place with their services started; node {node} is left cordoned{}, and `up` again waits for it and uncordons it",
            start.elapsed().as_secs(),
            bound.as_secs(),
            if ours { format!(" (marked {})", drain::MARK) } else { String::new() }
        )));
        r.status = HostStatus::Interrupted;
        return r;
    }
    if !ready {
        ctx.upgrade_failed();
        cp.close().await;
        let back = rollback(ctx, session, node_of, ops, from).await;
        let mut r = r.failed(HostError::Upgrade(format!(
            "upgrade {what}: node {node} did not report Ready{at_text} within {}s; {}it is left cordoned (see the kubelet's log on the host), and `up` again finishes the upgrade once it is fixed",
            bound.as_secs(),
            back.map(|b| format!("{b}, and ")).unwrap_or_default()
        )));
        r.status = HostStatus::Failed;
        return r;
    }
    // `--verify-pods`: the node's test pod, before it takes pods again; a
    // failure is a kubelet that never got Ready
    if ctx.opts.upgrade_pods {
        ctx.reporter.phase(
            &host.name,
            &format!("upgrade {what}: checking a test pod on node {node} (--verify-pods)"),
        );
        if let Err(why) = super::upgrade_resume::node_pods(ctx, host, node_of, &mut *cp).await {
            ctx.upgrade_failed();
            cp.close().await;
            if ctx.interrupt.is_set() {
                r.notes.push(format!(
                    "upgrade {what}: interrupted during its pod check ({why}); node {node} is left cordoned, and `up --verify-pods` again checks it and uncordons it"
                ));
                return r;
            }
            let back = rollback(ctx, session, node_of, ops, from).await;
            let mut r = r.failed(HostError::Upgrade(format!(
                "upgrade {what}: node {node} is Ready{at_text} but failed its pod check (--verify-pods): {why}; {}it is left cordoned, and `up --verify-pods` again retries the upgrade once the cause is fixed",
                back.map(|b| format!("{b}, and ")).unwrap_or_default()
            )));
            r.status = HostStatus::Failed;
            return r;
        }
    }
    if !ours {
        r.notes.push(format!(
            "upgrade {what}: node {node} is Ready{at_text} and left cordoned, as it was before this run (`kubectl uncordon {node}` when it should take pods)"
        ));
        cp.close().await;
        return r;
    }
    ctx.reporter
        .phase(&host.name, &format!("upgrade {what}: uncordon node {node}"));
    if let Err(e) = drain::release(&mut *cp, &node, ctx.opts.timeout).await {
        r.notes.push(format!(
            "upgrade {what}: node {node} is Ready{at_text} but still cordoned or marked ({e}): `kubectl uncordon {node}` and `kubectl annotate node {node} {}-`",
            drain::MARK
        ));
    }
    cp.close().await;
    r
}

/// Put back the kubelet and kube-proxy of release `from` (the node's before
/// the upgrade) and start their services: what was done, said for the
/// report; `None` when there is nothing to put back.
async fn rollback<O: NodeOps>(
    ctx: &Ctx,
    session: &mut Box<dyn Session>,
    node: &Node,
    ops: &O,
    from: Option<KubeVersion>,
) -> Option<String> {
    let from = from?;
    let script = ops.rollback_script(node, from)?;
    ctx.reporter.phase(
        &node.name,
        &format!("upgrade: rolling back to kubelet {from}"),
    );
    let said = match step::call(ctx, session, &node.name, "rollback", script).await {
        Ok(o) => match crate::wire::action_results(&o.stdout, 1) {
            (res, None) if res.len() == 1 => Ok(()),
            (res, Some(_)) => Err(res
                .last()
                .map(|(_, e)| crate::text::clip(&crate::text::printable(e), 300))
                .unwrap_or_default()),
            _ => Err(format!(
                "the host's script ended early (exit {})",
                o.exit.map_or("none".into(), |e| e.to_string())
            )),
        },
        Err(e) => Err(e.to_string()),
    };
    Some(match said {
        Ok(()) => format!(
            "rolled back: the kubelet and kube-proxy of release {from} were put back and their services started"
        ),
        Err(e) => format!(
            "the rollback to release {from} failed ({e}): put back by hand the kubelet and kube-proxy kept beside the new ones (`<path>.previous`, docs/operations.md \"Upgrading\")"
        ),
    })
}
