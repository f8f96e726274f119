//! The steps every command's host flow is made of: connect (with retries),
//! one remote call (recorded), probe, apply-and-reprobe, check.

use std::net::Ipv4Addr;
use std::time::Duration;

use super::Ctx;
use crate::alloc::Node;
use crate::diff::{Conflict, Describe, Diff};
use crate::inventory::Host;
use crate::os::NodeOps;
use crate::outcome::{ActionReport, ActionStatus, CallError, HostError, HostReport};
use crate::probe::FactsError;
use crate::record::Call;
use crate::transport::{Interpreter, Output, Session, Trace, TransportError};
use crate::verify::Pinged;
use crate::wire::action_results;

/// Connect, retrying transient failures with exponential backoff; the whole
/// phase, retries included, is bounded by `--timeout`.
pub(super) async fn connect(
    ctx: &Ctx,
    host: &Host,
    interpreter: Interpreter,
    trace: &crate::transport::Trace,
) -> Result<Box<dyn Session>, TransportError> {
    let deadline = tokio::time::Instant::now() + ctx.opts.timeout;
    let mut attempt = 0;
    loop {
        let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
        let res =
            match tokio::time::timeout(remaining, ctx.connector.connect(host, interpreter, trace))
                .await
            {
                Ok(r) => r,
                Err(_) => Err(TransportError::Connect {
                    addr: host.reach().to_string(),
                    msg: format!(
                        "no answer within --timeout {}s ({} attempts)",
                        ctx.opts.timeout.as_secs(),
                        attempt + 1
                    ),
                }),
            };
        match res {
            Ok(s) => return Ok(s),
            Err(e) if e.retriable() && attempt < ctx.opts.retries && !ctx.interrupt.is_set() => {
                attempt += 1;
                trace.mark("connect failed, retrying", format!("attempt {attempt}"), 0);
                let backoff = Duration::from_millis(250 * (1 << attempt.min(5)));
                if tokio::time::Instant::now() + backoff >= deadline {
                    return Err(e);
                }
                ctx.reporter.phase(
                    &host.name,
                    &format!("retry {attempt}/{} in {backoff:?}: {e}", ctx.opts.retries),
                );
                tokio::time::sleep(backoff).await;
            }
            Err(e) => return Err(e),
        }
    }
}

/// One remote call, bounded by `--timeout`, written to the run record as
/// soon as it returns.
pub(super) async fn call(
    ctx: &Ctx,
    s: &mut Box<dyn Session>,
    host: &str,
    what: &str,
    script: String,
) -> Result<Output, CallError> {
    call_within(ctx, s, host, what, script, None).await
}

/// [`call`], bounded by an action's own budget when it is longer than
/// `--timeout`: (the action's description, its budget).
async fn call_within(
    ctx: &Ctx,
    s: &mut Box<dyn Session>,
    host: &str,
    what: &str,
    script: String,
    budget: Option<(String, Duration)>,
) -> Result<Output, CallError> {
    let limit = budget
        .as_ref()
        .map_or(ctx.opts.timeout, |(_, b)| ctx.opts.timeout.max(*b));
    if let Some(t) = s.trace() {
        t.mark(&format!("call {what}"), "", 0);
    }
    let res = tokio::time::timeout(limit, s.run(&script)).await;
    let out = match res {
        Ok(Ok(o)) => Ok(o),
        Ok(Err(error)) => Err(CallError::Transport {
            what: what.to_string(),
            error,
        }),
        Err(_) => Err(CallError::Timeout {
            what: what.to_string(),
            host: host.to_string(),
            secs: limit.as_secs(),
            budget_of: budget.map(|(a, _)| a),
        }),
    };
    if let Some(record) = ctx.record.clone() {
        // The transcript is made here from the script and the output where
        // they are (at 200 hosts each apply script holds 200 routes and the
        // boot script: no copy of them but the transcript), then written
        // (crate::blocking: in place on one thread, else on the blocking
        // pool) and dropped.
        let failed: String;
        let call = match &out {
            Ok(o) => Call {
                what,
                script: &script,
                stdout: &o.stdout,
                stderr: &o.stderr,
                exit: o.exit,
            },
            Err(e) => {
                failed = format!("kwinctl: {e}");
                Call {
                    what,
                    script: &script,
                    stderr: &failed,
                    ..Call::default()
                }
            }
        };
        let transcript = call.transcript();
        drop(script);
        let name = host.to_string();
        let written = crate::blocking::file_work(move || record.append(&name, &transcript)).await;
        if let Ok(Err(e)) = written {
            ctx.reporter.say(&format!(
                "warning: cannot write the run record of {host}: {e}"
            ));
        }
    }
    out
}

/// Probe the host (pinging `reach`) and read its facts.
pub(super) async fn probe<O: NodeOps>(
    ctx: &Ctx,
    s: &mut Box<dyn Session>,
    host: &str,
    ops: &O,
    reach: &[Ipv4Addr],
) -> Result<O::Facts, HostError> {
    ctx.reporter.phase(host, "probing");
    let out = call(ctx, s, host, "probe", ops.probe(reach))
        .await
        .map_err(HostError::Probe)?;
    parse(ops, &out).map_err(HostError::Facts)
}

/// The facts a probe printed, unless it printed more than kwinctl reads.
fn parse<O: NodeOps>(ops: &O, out: &Output) -> Result<O::Facts, FactsError> {
    if out.dropped > 0 {
        return Err(FactsError::TooLarge {
            limit: crate::transport::MAX_OUTPUT,
            dropped: out.dropped,
            cause: crate::probe::too_large_cause(&out.stdout),
        });
    }
    ops.parse(out)
}

/// Run the diff's actions and then the probe (pinging `reach`): in one
/// remote call, except that an action with a budget of its own
/// ([`NodeOps::budget`]) runs in a call of its own, bounded by that budget;
/// the probe goes with the last call. `r.actions` says what happened to
/// each item. The facts after applying come back when every action
/// succeeded.
pub(super) async fn apply<O: NodeOps>(
    ctx: &Ctx,
    s: &mut Box<dyn Session>,
    node: &Node,
    ops: &O,
    d: &Diff<O::Action>,
    reach: &[Ipv4Addr],
    r: &mut HostReport,
) -> Result<O::Facts, HostError> {
    let actions: Vec<&O::Action> = d.actions().collect();
    let pushed = push_files(ctx, s, node, ops, &actions, r).await;
    if let Err(e) = pushed {
        fill(r, d, Vec::new(), ActionStatus::Skipped);
        return Err(e);
    }
    let parts = segments(ops, node, &actions);
    let mut results: Vec<(ActionStatus, String)> = Vec::new();
    let mut out = None;
    for (k, (range, budget, detached)) in parts.iter().enumerate() {
        let part = &actions[range.clone()];
        let last = k + 1 == parts.len();
        let (what, phase) = match (budget, parts.len()) {
            (_, 1) => (
                "apply".to_string(),
                format!("applying {} actions", part.len()),
            ),
            (Some(b), n) => (
                format!("apply {}/{n}: {}", k + 1, part[0].describe()),
                format!(
                    "{} ({}/{n}, budget {}s)",
                    part[0].describe(),
                    k + 1,
                    b.max(&ctx.opts.timeout).as_secs()
                ),
            ),
            (None, n) => (
                format!("apply {}/{n}", k + 1),
                format!("applying {} actions ({}/{n})", part.len(), k + 1),
            ),
        };
        // the cluster lock must still be this run's: checked before each
        // call that changes the host
        if let Err(why) = ctx.barrier.fence.check(ctx).await {
            let done = results.len();
            fill(r, d, results, ActionStatus::Skipped);
            return Err(if done == 0 {
                HostError::Refused(why)
            } else {
                HostError::Stopped {
                    done,
                    total: actions.len(),
                    exit: None,
                    stderr: why,
                    mode: ctx.mode,
                }
            });
        }
        let o = if *detached {
            // (it drops the host's network: see run/detach.rs)
            let token = super::detach::token(&ctx.cluster.run_id, range.start);
            let scripts = ops
                .detached(node, part[0], &token)
                .expect("a detached action's scripts");
            let desc = part[0].describe();
            match super::detach::run(ctx, s, node, scripts, &token, &desc).await {
                Ok(o) => o,
                Err(e) => {
                    fill(r, d, results, ActionStatus::Skipped);
                    return Err(e);
                }
            }
        } else {
            ctx.reporter.phase(&node.name, &phase);
            let script = ops.script(node, part, last.then_some(reach));
            let budget = budget.map(|b| (part[0].describe(), b));
            match call_within(ctx, s, &node.name, &what, script, budget).await {
                Ok(o) => o,
                Err(call) => {
                    fill(r, d, results, ActionStatus::Skipped);
                    return Err(HostError::Apply {
                        call,
                        mode: ctx.mode,
                    });
                }
            }
        };
        let (res, failed_at) = action_results(&o.stdout, part.len());
        let done = res.len();
        results.extend(res);
        if let Some(i) = failed_at {
            fill(r, d, results, ActionStatus::Skipped);
            let i = range.start + i;
            return Err(HostError::ActionFailed {
                index: i,
                what: actions[i].describe(),
                not_run: actions.len() - i - 1,
            });
        }
        if done < part.len() {
            fill(r, d, results, ActionStatus::Skipped);
            let done = r
                .actions
                .iter()
                .filter(|a| a.status == ActionStatus::Changed)
                .count();
            return Err(HostError::Stopped {
                done,
                total: actions.len(),
                exit: o.exit,
                stderr: o.stderr,
                mode: ctx.mode,
            });
        }
        out = Some(o);
    }
    fill(r, d, results, ActionStatus::Skipped);
    let mut out = out.expect("a diff with changes has an action");
    if parts.last().is_some_and(|p| p.2) {
        // the last action ran detached: the probe goes alone
        out = call(
            ctx,
            s,
            &node.name,
            "probe",
            ops.script(node, &[], Some(reach)),
        )
        .await
        .map_err(HostError::Probe)?;
    }
    parse(ops, &out).map_err(HostError::Reprobe)
}

/// How long pushing the files of one host may take at the least
/// (`--timeout`, if longer): a 100 MB binary over a slow link.
const PUSH_BUDGET: Duration = Duration::from_secs(30 * 60);

/// The files the actions place from the operator's machine, pushed before
/// the script that places them (`src/transfer/`); a note says what was
/// sent. Nothing on the host is replaced here.
async fn push_files<O: NodeOps>(
    ctx: &Ctx,
    s: &mut Box<dyn Session>,
    node: &Node,
    ops: &O,
    actions: &[&O::Action],
    r: &mut HostReport,
) -> Result<(), HostError> {
    let files: Vec<_> = actions
        .iter()
        .filter_map(|a| ops.pushes(a))
        .map(|l| (*l).clone())
        .collect();
    if files.is_empty() {
        return Ok(());
    }
    ctx.reporter
        .phase(&node.name, &format!("pushing {} files", files.len()));
    let budget = PUSH_BUDGET.max(ctx.opts.timeout);
    let target = ops.push_target();
    let pushed = match tokio::time::timeout(budget, crate::transfer::push(s, target, &files)).await
    {
        Ok(p) => p.map_err(|e| HostError::Push(e.to_string()))?,
        Err(_) => {
            return Err(HostError::Push(format!(
                "not done within {}s; what arrived is kept",
                budget.as_secs()
            )));
        }
    };
    for p in pushed.iter().filter(|p| p.sent > 0) {
        r.notes.push(format!(
            "pushed {} bytes of {}{}",
            p.sent,
            p.sha256,
            if p.from > 0 {
                format!(" (resumed at byte {})", p.from)
            } else {
                String::new()
            }
        ));
    }
    Ok(())
}

/// The calls an apply is made of: runs of actions without a budget of
/// their own go together; an action with one goes alone, with it; so does
/// an action run detached from the connection (the `bool`).
fn segments<O: NodeOps>(
    ops: &O,
    node: &Node,
    actions: &[&O::Action],
) -> Vec<(std::ops::Range<usize>, Option<Duration>, bool)> {
    let mut out: Vec<(std::ops::Range<usize>, Option<Duration>, bool)> = Vec::new();
    for (i, a) in actions.iter().enumerate() {
        let detached = ops.detached(node, a, "").is_some();
        match (ops.budget(a), detached, out.last_mut()) {
            (None, false, Some((range, None, false))) => range.end = i + 1,
            (b, detached, _) => out.push((i..i + 1, b, detached)),
        }
    }
    out
}

/// Each item's report: the results so far in action order, `rest` for the
/// actions after them.
fn fill<A: Describe>(
    r: &mut HostReport,
    d: &Diff<A>,
    results: Vec<(ActionStatus, String)>,
    rest: ActionStatus,
) {
    let mut results = results.into_iter();
    r.actions = d
        .items
        .iter()
        .map(|item| match &item.action {
            None => ActionReport::unchanged(&item.key),
            Some(a) => {
                let (status, stderr) = results.next().unwrap_or((rest, String::new()));
                ActionReport {
                    key: item.key.clone(),
                    action: a.describe(),
                    status,
                    stderr,
                }
            }
        })
        .collect();
}

/// A host's checks from its facts (and, on the control plane, the nodes as
/// kubectl sees them); true when one of them failed. `up` leaves out the
/// identity check of a node that joins in this run (src/join/): it gets its
/// certificate after the converge, and a failed join fails it then. `ca`:
/// the run's cluster CA ([`super::joining::ca`]).
#[allow(clippy::too_many_arguments)]
pub(super) fn check<O: NodeOps>(
    ops: &O,
    node: &Node,
    d: &Result<Diff<O::Action>, Conflict>,
    facts: &O::Facts,
    probed: &[Pinged],
    r: &mut HostReport,
    joining: bool,
    ca: Option<&crate::identity::issuer::Anchor>,
) -> bool {
    r.k8s = ops.k8s(facts);
    r.checks = crate::verify::checks(node, d, ops.reach(facts), probed);
    if !joining {
        r.checks.extend(ops.identity(node, facts, ca));
    }
    r.failed_checks().next().is_some()
}

/// One report per desired item: `status` for those with an action.
pub(super) fn reports_of<A: Describe>(d: &Diff<A>, status: ActionStatus) -> Vec<ActionReport> {
    d.items
        .iter()
        .map(|i| match &i.action {
            Some(a) => ActionReport {
                key: i.key.clone(),
                action: a.describe(),
                status,
                stderr: String::new(),
            },
            None => ActionReport::unchanged(&i.key),
        })
        .collect()
}

/// A host's protocol steps: to `-v` and the run record.
pub(super) fn emit(ctx: &Ctx, host: &str, transport: &str, trace: &Trace) {
    let steps = trace.steps();
    ctx.reporter.trace(host, transport, &steps);
    if let Some(r) = &ctx.record {
        r.trace(host, transport, steps);
    }
}
