//! Parallel fan-out: one task per host, bounded concurrency, timeouts,
//! retries of transient connection failures, progress, Ctrl-C.
//!
//! Per host: connect → probe (facts) → diff → [apply + re-probe in one remote
//! call] → verify. `plan` stops after diff, `verify` probes with reachability.

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;

use std::collections::BTreeMap;

use crate::diff::windows::WinAction;
use crate::diff::{self, Action, Conflict, Describe, Diff, LinuxDesired};
use crate::facts::windows::WindowsFacts;
use crate::facts::{self, LinuxFacts, Reach};
use crate::inventory::{Host, Os};
use crate::plan::{NodePlan, Peer, WindowsDesired};
use crate::record::RunRecord;
use crate::render::{Renderer, WinProbe};
use crate::report::{ActionReport, ActionStatus, HostReport, HostStatus, K8sView, Reporter};
use crate::transport::{self, ConnectOptions, Session, TransportError};
use crate::verify;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Plan,
    Up,
    Verify,
    Reset,
}

impl Mode {
    pub fn name(self) -> &'static str {
        match self {
            Mode::Plan => "plan",
            Mode::Up => "up",
            Mode::Verify => "verify",
            Mode::Reset => "reset",
        }
    }
}

pub struct RunOptions {
    pub parallel: usize,
    /// Which peers each node pings when checking.
    pub reach: verify::ReachMode,
    /// Bound on each remote call (connect, probe, apply).
    pub timeout: Duration,
    pub retries: u32,
    pub connect: ConnectOptions,
}

/// Set by the Ctrl-C handler: no new host starts; running hosts stop at the
/// next step boundary (never in the middle of a script).
#[derive(Clone, Default)]
pub struct Interrupt(Arc<AtomicBool>);

impl Interrupt {
    pub fn set(&self) {
        self.0.store(true, Ordering::SeqCst);
    }
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

struct Ctx {
    mode: Mode,
    opts: RunOptions,
    renderer: Renderer,
    reporter: Arc<Reporter>,
    interrupt: Interrupt,
    record: Option<Arc<RunRecord>>,
}

/// One host to run on: its inventory entry, its node plan and, for Windows,
/// its desired state.
pub struct Target {
    pub host: Host,
    pub node: NodePlan,
    pub windows: Option<WindowsDesired>,
}

/// Run `mode` on every target; reports come back in input order.
pub async fn run_all(
    mode: Mode,
    targets: Vec<Target>,
    opts: RunOptions,
    reporter: Arc<Reporter>,
    interrupt: Interrupt,
    record: Option<Arc<RunRecord>>,
) -> Vec<HostReport> {
    let sem = Arc::new(Semaphore::new(opts.parallel.max(1)));
    let ctx = Arc::new(Ctx {
        mode,
        opts,
        renderer: Renderer::new(),
        reporter,
        interrupt,
        record,
    });
    let mut tasks = Vec::new();
    let mut blanks = Vec::new();
    for t in targets {
        blanks.push(blank(&t.host, &t.node));
        let ctx = ctx.clone();
        let sem = sem.clone();
        tasks.push(tokio::spawn(async move {
            let _permit = sem.acquire_owned().await.expect("semaphore open");
            let start = Instant::now();
            let mut report = if ctx.interrupt.is_set() {
                let mut r = blank(&t.host, &t.node);
                r.status = HostStatus::Interrupted;
                r.error = Some("not started: interrupted".into());
                r
            } else {
                run_host(&ctx, &t).await
            };
            report.seconds = start.elapsed().as_secs_f64();
            ctx.reporter.host_done(&report);
            report
        }));
    }
    let mut out = Vec::new();
    for (t, b) in tasks.into_iter().zip(blanks) {
        // A bug in one host's task fails that host, not the whole run.
        out.push(t.await.unwrap_or_else(|e| {
            fail(
                b,
                format!("internal error (please report it): {e}; the host may be partly changed"),
            )
        }));
    }
    if matches!(mode, Mode::Verify | Mode::Up) {
        verify::kubernetes_nodes(&mut out);
    }
    out
}

fn blank(host: &Host, node: &NodePlan) -> HostReport {
    HostReport {
        host: host.name.clone(),
        os: host.os.to_string(),
        address: host.address.to_string(),
        pod_cidr: node.pod_cidr.to_string(),
        status: HostStatus::Ok,
        actions: Vec::new(),
        checks: Vec::new(),
        notes: Vec::new(),
        error: None,
        seconds: 0.0,
        k8s: K8sView::NotAsked,
    }
}

fn fail(mut r: HostReport, e: impl ToString) -> HostReport {
    r.status = HostStatus::Failed;
    r.error = Some(e.to_string());
    r
}

/// Connect, retrying transient failures with exponential backoff; the whole
/// phase, retries included, is bounded by `--timeout`.
async fn connect_with_retries(ctx: &Ctx, host: &Host) -> Result<Box<dyn Session>, TransportError> {
    let deadline = tokio::time::Instant::now() + ctx.opts.timeout;
    let mut attempt = 0;
    loop {
        let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
        let res = match tokio::time::timeout(remaining, transport::connect(host, &ctx.opts.connect))
            .await
        {
            Ok(r) => r,
            Err(_) => Err(TransportError::Connect {
                addr: host.address.to_string(),
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

async fn call(
    ctx: &Ctx,
    s: &mut Box<dyn Session>,
    r: &mut HostReport,
    what: &str,
    script: String,
) -> Result<transport::Output, String> {
    let res = tokio::time::timeout(ctx.opts.timeout, s.run(&script)).await;
    // The script moves into the record (at 200 hosts each apply script
    // holds 200 routes and the boot script: no second copy of it).
    let mut rec = crate::record::Call {
        what: what.to_string(),
        script,
        ..Default::default()
    };
    let out = match res {
        Ok(Ok(o)) => {
            rec.stdout = o.stdout.clone();
            rec.stderr = o.stderr.clone();
            rec.exit = o.exit;
            Ok(o)
        }
        Ok(Err(e)) => Err(format!("{what}: {e}")),
        Err(_) => Err(format!(
            "{what}: {} did not finish within --timeout {}s",
            r.host,
            ctx.opts.timeout.as_secs()
        )),
    };
    if let Err(e) = &out {
        rec.stderr = format!("kwinctl: {e}");
    }
    if let Some(record) = ctx.record.clone() {
        // Written now, off the runtime's threads, and then dropped.
        let host = r.host.clone();
        let written = tokio::task::spawn_blocking(move || record.append(&host, &rec)).await;
        if let Ok(Err(e)) = written {
            ctx.reporter.say(&format!(
                "warning: cannot write the run record of {}: {e}",
                r.host
            ));
        }
    }
    out
}

/// What differs between operating systems in a host's run; the flow itself
/// (probe → diff → apply + re-probe → verify) is [`converge`].
trait NodeOps {
    type Facts;
    type Action: Describe;
    fn probe(&self, reach: &[Ipv4Addr]) -> String;
    fn parse(&self, o: &transport::Output) -> Result<Self::Facts, String>;
    fn diff(&self, f: &Self::Facts) -> Result<Diff<Self::Action>, Conflict>;
    fn reset(&self, f: &Self::Facts) -> Diff<Self::Action>;
    /// The actions, then the probe (with `reach`), as one script.
    fn script(&self, actions: &[&Self::Action], reach: &[Ipv4Addr]) -> String;
    fn reach<'f>(&self, f: &'f Self::Facts) -> &'f BTreeMap<Ipv4Addr, Reach>;
    /// The control plane's kubectl view, when this node was asked for it.
    fn k8s(&self, _f: &Self::Facts) -> K8sView {
        K8sView::NotAsked
    }
}

fn facts_of(o: &transport::Output) -> Result<&str, String> {
    facts::facts_json(&o.stdout, &o.stderr).map_err(|e| e.to_string())
}

struct LinuxOps<'a> {
    r: &'a Renderer,
    node: &'a NodePlan,
    boot: String,
    unit: String,
    /// Control plane, checking: also list the nodes with kubectl.
    ask_nodes: bool,
}

impl NodeOps for LinuxOps<'_> {
    type Facts = LinuxFacts;
    type Action = Action;
    fn probe(&self, reach: &[Ipv4Addr]) -> String {
        self.r
            .linux_probe(reach, self.ask_nodes && !reach.is_empty())
    }
    fn parse(&self, o: &transport::Output) -> Result<LinuxFacts, String> {
        LinuxFacts::parse(&o.stdout, &o.stderr).map_err(|e| e.to_string())
    }
    fn diff(&self, f: &LinuxFacts) -> Result<Diff<Action>, Conflict> {
        diff::diff_linux(
            &LinuxDesired {
                node: self.node,
                boot_script: &self.boot,
                unit: &self.unit,
            },
            f,
        )
    }
    fn reset(&self, f: &LinuxFacts) -> Diff<Action> {
        diff::diff_reset_linux(f)
    }
    fn script(&self, actions: &[&Action], reach: &[Ipv4Addr]) -> String {
        self.r.linux_script(
            &self.node.name,
            &self.node.cluster_name,
            actions,
            Some((reach, self.ask_nodes && !reach.is_empty())),
        )
    }
    fn reach<'f>(&self, f: &'f LinuxFacts) -> &'f BTreeMap<Ipv4Addr, Reach> {
        &f.reach
    }
    fn k8s(&self, f: &LinuxFacts) -> K8sView {
        match (&f.k8s_nodes, self.ask_nodes) {
            (_, false) => K8sView::NotAsked,
            (None, true) => K8sView::NoKubectl,
            (Some(Err(_)), true) => K8sView::KubectlFailed,
            (Some(Ok(n)), true) => K8sView::Nodes(n.clone()),
        }
    }
}

struct WindowsOps<'a> {
    r: &'a Renderer,
    node: &'a NodePlan,
    desired: &'a WindowsDesired,
    files: Vec<String>,
    services: Vec<String>,
}

impl<'a> WindowsOps<'a> {
    fn new(r: &'a Renderer, node: &'a NodePlan, desired: &'a WindowsDesired) -> Self {
        let mut files: Vec<String> = desired.files.iter().map(|f| f.path.clone()).collect();
        for f in &desired.required_files {
            if !files.contains(f) {
                files.push(f.clone());
            }
        }
        let services = desired.services.iter().map(|s| s.name.clone()).collect();
        WindowsOps {
            r,
            node,
            desired,
            files,
            services,
        }
    }
    fn probe_of<'p>(&'p self, reach: &'p [Ipv4Addr]) -> WinProbe<'p> {
        WinProbe {
            files: &self.files,
            services: &self.services,
            reach,
        }
    }
}

impl NodeOps for WindowsOps<'_> {
    type Facts = WindowsFacts;
    type Action = WinAction;
    fn probe(&self, reach: &[Ipv4Addr]) -> String {
        self.r.windows_probe(&self.probe_of(reach))
    }
    fn parse(&self, o: &transport::Output) -> Result<WindowsFacts, String> {
        WindowsFacts::parse(facts_of(o)?).map_err(|e| e.to_string())
    }
    fn diff(&self, f: &WindowsFacts) -> Result<Diff<WinAction>, Conflict> {
        diff::windows::diff_windows(self.node, self.desired, f)
    }
    fn reset(&self, f: &WindowsFacts) -> Diff<WinAction> {
        diff::windows::diff_reset_windows(self.node, self.desired, f)
    }
    fn script(&self, actions: &[&WinAction], reach: &[Ipv4Addr]) -> String {
        self.r.windows_script(
            &self.node.name,
            &self.node.cluster_name,
            self.node.address,
            self.desired.adapter.as_deref(),
            actions,
            Some(&self.probe_of(reach)),
        )
    }
    fn reach<'f>(&self, f: &'f WindowsFacts) -> &'f BTreeMap<Ipv4Addr, Reach> {
        &f.reach
    }
}

async fn run_host(ctx: &Ctx, t: &Target) -> HostReport {
    let r = blank(&t.host, &t.node);
    ctx.reporter.phase(&t.host.name, "connecting");
    let mut session = match connect_with_retries(ctx, &t.host).await {
        Ok(s) => s,
        Err(e) => return fail(r, e),
    };
    let report = match (&t.host.os, &t.windows) {
        (Os::Linux, _) => {
            let ops = LinuxOps {
                r: &ctx.renderer,
                node: &t.node,
                boot: ctx.renderer.linux_boot_script(&t.node),
                unit: ctx.renderer.linux_unit(),
                ask_nodes: t.host.role == crate::inventory::Role::ControlPlane,
            };
            converge(ctx, &mut session, &t.host, &t.node, &ops, r).await
        }
        (Os::Windows, Some(w)) => {
            let ops = WindowsOps::new(&ctx.renderer, &t.node, w);
            converge(ctx, &mut session, &t.host, &t.node, &ops, r).await
        }
        (Os::Windows, None) => fail(r, "internal: no desired state for a Windows host"),
    };
    session.close().await;
    report
}

/// The per-host flow, for any OS.
async fn converge<O: NodeOps>(
    ctx: &Ctx,
    s: &mut Box<dyn Session>,
    host: &Host,
    node: &NodePlan,
    ops: &O,
    mut r: HostReport,
) -> HostReport {
    let probed = verify::reach_peers(node, ctx.opts.reach);
    let reach: Vec<Ipv4Addr> = probed.iter().map(|p| p.address).collect();
    ctx.reporter.phase(&host.name, "probing");
    // verify and up ask for reachability in the first probe: a converged
    // host (the common case) is then checked with one remote call.
    let checking = matches!(ctx.mode, Mode::Verify | Mode::Up);
    let probe = ops.probe(if checking { &reach } else { &[] });
    let facts = match call(ctx, s, &mut r, "probe", probe)
        .await
        .and_then(|o| ops.parse(&o))
    {
        Ok(f) => f,
        Err(e) => return fail(r, e),
    };
    let d = match ctx.mode {
        Mode::Reset => Ok(ops.reset(&facts)),
        _ => ops.diff(&facts),
    };
    match ctx.mode {
        Mode::Verify => {
            if let Ok(d) = &d {
                r.notes = d.notes.clone();
            }
            if check(ops, node, &d, &facts, &probed, &mut r) {
                r.status = HostStatus::Failed;
            }
            return r;
        }
        Mode::Plan => {
            return match d {
                Err(c) => fail(r, c),
                Ok(d) => {
                    r.notes = d.notes.clone();
                    r.actions = reports_of(&d, ActionStatus::Planned);
                    r.status = if d.changes() > 0 {
                        HostStatus::Pending
                    } else {
                        HostStatus::Ok
                    };
                    r
                }
            };
        }
        Mode::Up | Mode::Reset => {}
    }
    let d = match d {
        Ok(d) => d,
        Err(c) => return fail(r, c),
    };
    r.notes = d.notes.clone();
    if ctx.interrupt.is_set() {
        r.actions = reports_of(&d, ActionStatus::Skipped);
        r.status = HostStatus::Interrupted;
        r.error = Some("interrupted after probing: nothing was changed".into());
        return r;
    }

    // Apply and re-probe in one remote call.
    let actions: Vec<&O::Action> = d.actions().collect();
    if actions.is_empty() && ctx.mode == Mode::Up {
        // Converged: the first probe's facts (with reachability) are the
        // verification; no second call.
        r.actions = reports_of(&d, ActionStatus::Ok);
        if check(ops, node, &Ok(d), &facts, &probed, &mut r) {
            r.status = HostStatus::Failed;
            r.error = Some("verify failed (nothing needed changing)".into());
        } else {
            r.status = HostStatus::Ok;
        }
        return r;
    }
    if !actions.is_empty() {
        ctx.reporter
            .phase(&host.name, &format!("applying {} actions", actions.len()));
    } else {
        ctx.reporter.phase(&host.name, "verifying");
    }
    let verify_reach: &[Ipv4Addr] = if ctx.mode == Mode::Up { &reach } else { &[] };
    let script = ops.script(&actions, verify_reach);
    let out = match call(ctx, s, &mut r, "apply", script).await {
        Ok(o) => o,
        Err(e) => {
            r.actions = reports_of(&d, ActionStatus::Skipped);
            return fail(
                r,
                format!(
                    "{e}; the host may be partly changed: rerun `kwinctl {}`",
                    ctx.mode.name()
                ),
            );
        }
    };
    let (results, failed_at) = action_results(&out.stdout, actions.len());
    let mut idx = 0;
    r.actions = d
        .items
        .iter()
        .map(|item| {
            let Some(a) = &item.action else {
                return ActionReport {
                    key: item.key.clone(),
                    action: format!("{} (unchanged)", item.key),
                    status: ActionStatus::Ok,
                    stderr: String::new(),
                };
            };
            let (status, stderr) = results
                .get(idx)
                .cloned()
                .unwrap_or((ActionStatus::Skipped, String::new()));
            idx += 1;
            ActionReport {
                key: item.key.clone(),
                action: a.describe(),
                status,
                stderr,
            }
        })
        .collect();
    if let Some(i) = failed_at {
        let what = actions[i].describe();
        return fail(
            r,
            format!(
                "action {} failed ({what}); the {} actions after it were not run",
                i + 1,
                actions.len() - i - 1
            ),
        );
    }
    if results.len() < actions.len() {
        return fail(
            r,
            format!(
                "the script stopped after {} of {} actions (exit {:?}): {}",
                results.len(),
                actions.len(),
                out.exit,
                crate::report::clip(out.stderr.trim(), 300)
            ),
        );
    }
    let after = match ops.parse(&out) {
        Ok(f) => f,
        Err(e) => return fail(r, format!("re-probe after apply: {e}")),
    };
    if ctx.mode == Mode::Reset {
        if ops.reset(&after).changes() > 0 {
            return fail(r, "kwinctl's changes are still present after reset");
        }
    } else {
        if check(ops, node, &ops.diff(&after), &after, &probed, &mut r) {
            r.status = HostStatus::Failed;
            r.error = Some("verify after apply failed".into());
            return r;
        }
    }
    r.status = if actions.is_empty() {
        HostStatus::Ok
    } else {
        HostStatus::Changed
    };
    r
}

/// A host's checks from its facts (and, on the control plane, the nodes as
/// kubectl sees them); true when one of them failed.
fn check<O: NodeOps>(
    ops: &O,
    node: &NodePlan,
    d: &Result<Diff<O::Action>, Conflict>,
    facts: &O::Facts,
    probed: &[&Peer],
    r: &mut HostReport,
) -> bool {
    r.k8s = ops.k8s(facts);
    r.checks = verify::checks(node, d, ops.reach(facts), probed);
    r.failed_checks().next().is_some()
}

fn reports_of<A: Describe>(d: &Diff<A>, status: ActionStatus) -> Vec<ActionReport> {
    d.items
        .iter()
        .map(|i| match &i.action {
            Some(a) => ActionReport {
                key: i.key.clone(),
                action: a.describe(),
                status,
                stderr: String::new(),
            },
            None => ActionReport {
                key: i.key.clone(),
                action: format!("{} (unchanged)", i.key),
                status: ActionStatus::Ok,
                stderr: String::new(),
            },
        })
        .collect()
}

/// Read the `KWX <id> ok|failed <rc>` and `KWE <stderr>` lines the prelude's
/// `kw_run` prints. Returns per-action results in order and the index of the
/// failed action, if any.
pub fn action_results(stdout: &str, n: usize) -> (Vec<(ActionStatus, String)>, Option<usize>) {
    let mut res: Vec<(ActionStatus, String)> = Vec::new();
    let mut failed = None;
    for line in stdout.lines() {
        if let Some(rest) = line.strip_prefix("KWX ") {
            let mut it = rest.split_whitespace();
            let id: Option<usize> = it.next().and_then(|s| s.parse().ok());
            let st = it.next();
            if id != Some(res.len()) || res.len() >= n {
                continue;
            }
            match st {
                Some("ok") => res.push((ActionStatus::Changed, String::new())),
                _ => {
                    failed = Some(res.len());
                    res.push((ActionStatus::Failed, String::new()));
                }
            }
        } else if let Some(e) = line.strip_prefix("KWE ")
            && let Some(last) = res.last_mut()
            && last.0 == ActionStatus::Failed
        {
            if !last.1.is_empty() {
                last.1.push('\n');
            }
            last.1.push_str(e);
        }
    }
    (res, failed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_action_markers() {
        let out = "KWX 0 ok\nnoise\nKWX 1 failed 2\nKWE RTNETLINK answers: File exists\nKWE more\n";
        let (r, f) = action_results(out, 3);
        assert_eq!(r.len(), 2);
        assert_eq!(r[0].0, ActionStatus::Changed);
        assert_eq!(r[1].0, ActionStatus::Failed);
        assert_eq!(r[1].1, "RTNETLINK answers: File exists\nmore");
        assert_eq!(f, Some(1));
        // out-of-order or forged ids are ignored
        let (r, f) = action_results("KWX 5 ok\nKWX 0 ok\n", 1);
        assert_eq!((r.len(), f), (1, None));
    }
}
