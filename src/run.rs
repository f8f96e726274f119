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

use crate::diff::{self, Action, Describe, HostDiff, LinuxDesired};
use crate::facts::{self, LinuxFacts};
use crate::inventory::{Host, Os};
use crate::plan::NodePlan;
use crate::render::Renderer;
use crate::report::{ActionReport, ActionStatus, HostReport, HostStatus, Reporter};
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
}

/// Run `mode` on every (host, node plan) pair; reports come back in input order.
pub async fn run_all(
    mode: Mode,
    targets: Vec<(Host, NodePlan)>,
    opts: RunOptions,
    reporter: Arc<Reporter>,
    interrupt: Interrupt,
) -> Vec<HostReport> {
    let sem = Arc::new(Semaphore::new(opts.parallel.max(1)));
    let ctx = Arc::new(Ctx {
        mode,
        opts,
        renderer: Renderer::new(),
        reporter,
        interrupt,
    });
    let mut tasks = Vec::new();
    for (host, node) in targets {
        let ctx = ctx.clone();
        let sem = sem.clone();
        tasks.push(tokio::spawn(async move {
            let _permit = sem.acquire_owned().await.expect("semaphore open");
            let start = Instant::now();
            let mut report = if ctx.interrupt.is_set() {
                let mut r = blank(&host, &node);
                r.status = HostStatus::Interrupted;
                r.error = Some("not started: interrupted".into());
                r
            } else {
                run_host(&ctx, &host, &node).await
            };
            report.seconds = start.elapsed().as_secs_f64();
            ctx.reporter.host_done(&report);
            report
        }));
    }
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.expect("host task panicked"));
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
        transcript: Vec::new(),
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
    script: &str,
) -> Result<transport::Output, String> {
    let res = tokio::time::timeout(ctx.opts.timeout, s.run(script)).await;
    let mut rec = crate::record::Call {
        what: what.to_string(),
        script: script.to_string(),
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
    r.transcript.push(rec);
    out
}

fn parse_linux(o: &transport::Output) -> Result<LinuxFacts, String> {
    let json = facts::facts_json(&o.stdout, &o.stderr).map_err(|e| e.to_string())?;
    LinuxFacts::parse(json).map_err(|e| e.to_string())
}

async fn run_host(ctx: &Ctx, host: &Host, node: &NodePlan) -> HostReport {
    let r = blank(host, node);
    if host.os != Os::Linux {
        return fail(
            r,
            "Windows nodes are not supported yet by this version of kwinctl (see README: Windows)",
        );
    }
    ctx.reporter.phase(&host.name, "connecting");
    let mut session = match connect_with_retries(ctx, host).await {
        Ok(s) => s,
        Err(e) => return fail(r, e),
    };
    let report = linux_host(ctx, &mut session, host, node, r).await;
    session.close().await;
    report
}

async fn linux_host(
    ctx: &Ctx,
    s: &mut Box<dyn Session>,
    host: &Host,
    node: &NodePlan,
    mut r: HostReport,
) -> HostReport {
    let reach: Vec<Ipv4Addr> = node.peers.iter().map(|p| p.address).collect();
    let boot = ctx.renderer.linux_boot_script(node);
    let unit = ctx.renderer.linux_unit();
    let desired = LinuxDesired {
        node,
        boot_script: &boot,
        unit: &unit,
    };

    ctx.reporter.phase(&host.name, "probing");
    let probe = if ctx.mode == Mode::Verify {
        ctx.renderer.linux_probe(&reach)
    } else {
        ctx.renderer.linux_probe(&[])
    };
    let facts = match call(ctx, s, &mut r, "probe", &probe)
        .await
        .and_then(|o| parse_linux(&o))
    {
        Ok(f) => f,
        Err(e) => return fail(r, e),
    };

    let d = match ctx.mode {
        Mode::Reset => Ok(diff::diff_reset_linux(&facts)),
        _ => diff::diff_linux(&desired, &facts),
    };
    match ctx.mode {
        Mode::Verify => {
            r.checks = verify::verify_linux(node, &d, &facts);
            if let Ok(d) = &d {
                r.notes = d.notes.clone();
            }
            if r.failed_checks().next().is_some() {
                r.status = HostStatus::Failed;
            }
            return r;
        }
        Mode::Plan => {
            return match d {
                Err(c) => fail(r, c),
                Ok(d) => {
                    r.notes = d.notes.clone();
                    r.actions = reports_of(&d, |_| ActionStatus::Planned);
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
        r.actions = reports_of(&d, |_| ActionStatus::Skipped);
        r.status = HostStatus::Interrupted;
        r.error = Some("interrupted after probing: nothing was changed".into());
        return r;
    }

    // Apply and re-probe in one remote call.
    let actions: Vec<&Action> = d.actions().collect();
    if !actions.is_empty() {
        ctx.reporter
            .phase(&host.name, &format!("applying {} actions", actions.len()));
    } else {
        ctx.reporter.phase(&host.name, "verifying");
    }
    let verify_reach: &[Ipv4Addr] = if ctx.mode == Mode::Up { &reach } else { &[] };
    let script =
        ctx.renderer
            .linux_script(&node.name, &node.cluster_name, &actions, Some(verify_reach));
    let out = match call(ctx, s, &mut r, "apply", &script).await {
        Ok(o) => o,
        Err(e) => {
            r.actions = reports_of(&d, |_| ActionStatus::Skipped);
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
    let after = match parse_linux(&out) {
        Ok(f) => f,
        Err(e) => return fail(r, format!("re-probe after apply: {e}")),
    };
    if ctx.mode == Mode::Reset {
        let left = diff::diff_reset_linux(&after);
        if left.changes() > 0 {
            return fail(r, "kwinctl routes or files are still present after reset");
        }
    } else {
        let d2 = diff::diff_linux(&desired, &after);
        r.checks = verify::verify_linux(node, &d2, &after);
        if r.failed_checks().next().is_some() {
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

fn reports_of(d: &HostDiff, status: impl Fn(&Action) -> ActionStatus) -> Vec<ActionReport> {
    d.items
        .iter()
        .map(|i| match &i.action {
            Some(a) => ActionReport {
                key: i.key.clone(),
                action: a.describe(),
                status: status(a),
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
