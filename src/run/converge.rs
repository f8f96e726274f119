//! `up`: apply the diff and re-probe in one remote call, then check. A host
//! that needs nothing is checked from its first probe: one remote call.

use std::ops::ControlFlow;
use std::time::Duration;

use super::{Ctx, step};
use crate::alloc::Node;
use crate::diff::{Conflict, Diff};
use crate::inventory::Host;
use crate::os::NodeOps;
use crate::outcome::{ActionStatus, HostError, HostReport, HostStatus};
use crate::transport::Session;
use crate::verify::Pinged;

/// A host with changes to make, before it starts them: `Break` with its
/// report, every action skipped, when Ctrl-C came, the run's lock refused
/// it (`refused`) or `--max-fail` was reached; `Continue` to go on (`up`
/// and `reset` alike).
pub(super) fn held_back<A: crate::diff::Describe>(
    ctx: &Ctx,
    d: &Diff<A>,
    refused: Option<HostError>,
    r: HostReport,
) -> ControlFlow<HostReport, HostReport> {
    let skipped = |mut r: HostReport| {
        r.actions = step::reports_of(d, ActionStatus::Skipped);
        r
    };
    if ctx.interrupt.is_set() {
        return ControlFlow::Break(skipped(r).interrupted(true));
    }
    if let Some(e) = refused {
        return ControlFlow::Break(skipped(r).failed(e));
    }
    if let Some((failed, max)) = ctx.max_fail_reached() {
        return ControlFlow::Break(skipped(r).not_started(failed, max));
    }
    ControlFlow::Continue(r)
}

#[allow(clippy::too_many_arguments)]
pub(super) async fn converge<O: NodeOps>(
    ctx: &Ctx,
    host: &Host,
    s: &mut Box<dyn Session>,
    node: &Node,
    ops: &O,
    facts: &O::Facts,
    work: Result<Diff<O::Action>, Conflict>,
    probed: &[Pinged],
    refused: Option<HostError>,
    mut r: HostReport,
) -> HostReport {
    let d = match work {
        Ok(d) => d,
        Err(c) => return r.failed(HostError::Conflict(c)),
    };
    r.notes = d.notes.clone();
    if d.changes() == 0 {
        // Converged: the first probe's facts (with reachability) are the
        // verification; no second call.
        r.actions = step::reports_of(&d, ActionStatus::Ok);
        let ca = super::joining::ca(ctx);
        let joining = ctx.mode == crate::mode::Mode::Up && ops.must_join(facts, ca).is_some();
        if step::check(ops, node, &Ok(d), facts, probed, &mut r, joining, ca) {
            return r.failed(HostError::VerifyFailed { changed: false });
        }
        r.status = HostStatus::Ok;
        return r;
    }
    let mut r = match held_back(ctx, &d, refused, r) {
        ControlFlow::Continue(r) => r,
        ControlFlow::Break(done) => return done,
    };
    let reach: Vec<_> = probed.iter().map(|p| p.address).collect();
    let mut after = match step::apply(ctx, s, node, ops, &d, &reach, &mut r).await {
        Ok(f) => f,
        Err(e) => return r.failed(e),
    };
    let mut left = ops.diff(node, &after);
    if ctx.opts.reboot && matches!(left, Err(Conflict::Reboot(_))) {
        after = match restart_and_go_on(ctx, host, s, node, ops, &after, &reach, &mut r).await {
            Ok(f) => f,
            Err(e) => return r.failed(e),
        };
        left = ops.diff(node, &after);
    }
    let ca = super::joining::ca(ctx);
    let joining = ctx.mode == crate::mode::Mode::Up && ops.must_join(&after, ca).is_some();
    if step::check(ops, node, &left, &after, probed, &mut r, joining, ca) {
        return r.failed(HostError::VerifyFailed { changed: true });
    }
    r.status = HostStatus::Changed;
    r
}

/// How long `up --reboot` waits for a restarted host to answer again.
const REBOOT_WAIT: Duration = Duration::from_secs(15 * 60);

/// `up --reboot`: restart the host (its OS's own way, a few seconds after
/// the call returns), wait until it answers with a new boot time, probe it
/// and apply what is left; the facts after that. Bounded by
/// [`REBOOT_WAIT`]; an interrupt ends the wait.
#[allow(clippy::too_many_arguments)]
async fn restart_and_go_on<O: NodeOps>(
    ctx: &Ctx,
    host: &Host,
    s: &mut Box<dyn Session>,
    node: &Node,
    ops: &O,
    before: &O::Facts,
    reach: &[std::net::Ipv4Addr],
    r: &mut HostReport,
) -> Result<O::Facts, HostError> {
    let (Some(script), Some(booted)) = (ops.reboot_script(), ops.boot_id(before)) else {
        return Err(HostError::Restart(
            "this host cannot be restarted by kwinctl (no boot time in its facts): restart it yourself, then run `kwinctl up` again".into(),
        ));
    };
    ctx.reporter.phase(&node.name, "restarting the host");
    step::call(ctx, s, &node.name, "restart", script)
        .await
        .map_err(HostError::Probe)?;
    r.notes.push("restarted by `up --reboot`".into());
    let deadline = tokio::time::Instant::now() + REBOOT_WAIT;
    let facts = loop {
        if ctx.interrupt.is_set() {
            return Err(HostError::Restart(
                "interrupted while waiting for the restarted host".into(),
            ));
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(HostError::Restart(format!(
                "the host did not come back from its restart within {} minutes: check it, then run `kwinctl up` again",
                REBOOT_WAIT.as_secs() / 60
            )));
        }
        tokio::time::sleep(Duration::from_secs(3)).await;
        ctx.reporter.phase(
            &node.name,
            "waiting for the host to come back from its restart",
        );
        // (the reconnections show in the host's trace)
        let trace = s.trace().cloned().unwrap_or_default();
        let Ok(mut fresh) =
            step::connect(ctx, host, crate::transport::Interpreter::PowerShell, &trace).await
        else {
            continue;
        };
        match step::probe(ctx, &mut fresh, &node.name, ops, &[]).await {
            Ok(f) if ops.boot_id(&f).is_some_and(|b| b != booted) => {
                std::mem::replace(s, fresh).close().await;
                break f;
            }
            _ => fresh.close().await,
        }
    };
    let d = match ops.diff(node, &facts) {
        Ok(d) => d,
        Err(c) => return Err(HostError::Conflict(c)),
    };
    if d.changes() == 0 {
        return Ok(facts);
    }
    let done = std::mem::take(&mut r.actions);
    let after = step::apply(ctx, s, node, ops, &d, reach, r).await;
    // the report lists both rounds: before the restart, then after it
    let second = std::mem::replace(&mut r.actions, done);
    for a in second.into_iter().filter(|a| a.status != ActionStatus::Ok) {
        match r.actions.iter_mut().find(|x| x.key == a.key) {
            Some(x) => *x = a,
            None => r.actions.push(a),
        }
    }
    after
}
