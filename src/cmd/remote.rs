//! `plan`, `up`, `verify`, `reset`: lock → load → select → desired state →
//! run on every host (which probes them all, allocates from what the nodes
//! record, and changes the selected ones) → summary.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use super::{Common, Inputs, load_remote};
use crate::error::{CliError, Exit};
use crate::lock::Lock;
use crate::mode::Mode;
use crate::os::{Desired, windows::Uploads};
use crate::outcome::{HostError, HostReport, HostStatus};
use crate::record::{self, RunRecord};
use crate::report::{Reporter, err_line};
use crate::run::{self, Interrupt, RunOptions, Target};
use crate::transport::{self, ConfigSource, ConnectOptions};
use crate::verify::ReachMode;

/// The hosts the run is about: `--limit`, or what the last run left to do
/// (`--only-failed`), or all. `None`: nothing to do.
fn selection(c: &Common, mode: Mode, l: &Inputs) -> Result<Option<BTreeSet<String>>, CliError> {
    let gone = removed(l);
    if !c.only_failed {
        let removed: Vec<String> = gone.keys().cloned().collect();
        let want = crate::select::resolve(&l.inv, &removed, &c.limit)
            .map_err(CliError::bad)?
            .unwrap_or_default();
        if let Some(w) = want.iter().find(|w| gone.contains_key(*w))
            && !mode.resets()
        {
            return Err(CliError::bad(format!(
                "--limit names {w:?}, which was removed from {}: `kwinctl reset --limit {w}` \
                 reaches it (its block stays reserved until then)",
                l.inv.path.display()
            )));
        }
        return Ok(Some(want));
    }
    // `up`, `plan` and `verify` look at what the last `up` left; `reset`
    // at the last `reset`.
    let command = if mode.resets() { "reset" } else { "up" };
    let last = record::load_last(&l.path, command).map_err(CliError::bad)?;
    let limit = last.to_redo();
    if limit.is_empty() {
        err_line(&format!(
            "--only-failed: the last `kwinctl {command}` ({}) left nothing to do",
            last.run_dir.display()
        ));
        return Ok(None);
    }
    err_line(&format!("--only-failed: {}", limit.join(", ")));
    // hosts no longer in the inventory (nor removed hosts for `reset`) are
    // left out
    let want: BTreeSet<String> = limit
        .iter()
        .map(|w| w.to_ascii_lowercase())
        .filter(|k| l.inv.host(k).is_some() || (mode.resets() && gone.contains_key(k)))
        .collect();
    if want.is_empty() {
        err_line("--only-failed: none of them is in the inventory any more: nothing to do");
        return Ok(None);
    }
    Ok(Some(want))
}

pub fn remote(c: &Common, mode: Mode) -> Result<Exit, CliError> {
    run(c, mode).map(|(exit, _)| exit)
}

/// `verify`, with `--pods` the test pods too (see [`crate::podcheck`]).
pub fn verify(c: &Common, pods: bool) -> Result<Exit, CliError> {
    run_with(c, Mode::Verify, pods).map(|(exit, _)| exit)
}

/// A remote command: its exit, and how many selected hosts it found with
/// something to do (`plan`) or did something to.
pub(super) fn run(c: &Common, mode: Mode) -> Result<(Exit, usize), CliError> {
    run_with(c, mode, false)
}

fn run_with(c: &Common, mode: Mode, pods: bool) -> Result<(Exit, usize), CliError> {
    // One operator at a time per inventory for commands that change hosts
    // (the cluster lock on the lock host covers other machines and other
    // inventories); taken before the state file is read, and keyed by the
    // inventory's real path. A missing inventory is reported by `load`.
    let _lock = if mode.changes_hosts() && c.inventory.is_file() {
        Some(Lock::acquire(&super::real_path(&c.inventory), mode.name())?)
    } else {
        None
    };
    if mode.changes_hosts() {
        crate::os::lock_lease_setting().map_err(CliError::bad)?;
    }
    if c.verify_pods && mode != Mode::Up {
        return Err(CliError::bad(format!(
            "--verify-pods checks each node `kwinctl up` upgrades; `kwinctl {mode}` upgrades none: leave it out{}",
            if mode == Mode::Verify {
                " (`kwinctl verify --pods` checks every selected node's pods)"
            } else {
                ""
            }
        )));
    }
    if c.max_fail.is_some() && matches!(mode, Mode::Plan | Mode::Verify) {
        return Err(CliError::bad(format!(
            "--max-fail stops a run from changing further hosts; `kwinctl {mode}` changes nothing: leave it out"
        )));
    }
    let l = load_remote(c)?;
    super::register_secrets(&l.inv);
    let Some(want) = selection(c, mode, &l)? else {
        return Ok((Exit::Ok, 0));
    };
    let selected = |name: &str| want.is_empty() || want.contains(&name.to_ascii_lowercase());
    let (connect, targets) = prepare(c, &l, &want, &selected)?;
    let names: Vec<String> = targets
        .iter()
        .filter(|t| t.selected)
        .map(|t| t.host.name.clone())
        .collect();
    let reporter = Arc::new(Reporter::new(c.output, mode, names.len(), c.verbose));
    let record = start(c, mode, &l, &targets, &names, &reporter)?;
    let interrupt = Interrupt::default();
    let rt = runtime(mode)?;
    let opts = RunOptions {
        parallel: c.parallel.unwrap_or(super::DEFAULT_PARALLEL) as usize,
        reach: c.reach.unwrap_or(ReachMode::Auto),
        timeout: Duration::from_secs(c.timeout),
        retries: c.retries,
        with_peer_routes: c.with_peer_routes,
        reboot: c.reboot,
        allow_downgrade: c.allow_downgrade,
        accept_ca: c.accept_ca.clone(),
        // kubelet upgrades go one node at a time unless --parallel says
        upgrade_parallel: super::upgrades_at_once(c.parallel),
        upgrade_pods: c.verify_pods,
        // a rolling change (--parallel 1) stops at its first failed host
        // unless --max-fail says otherwise
        max_fail: c
            .max_fail
            .map(|m| m.threshold(names.len()))
            .or((c.parallel == Some(1) && mode.changes_hosts()).then_some(1)),
        lease: Duration::from_secs(crate::os::lock_lease()),
        detach_wait: Duration::from_secs(c.detach_wait),
    };
    let cluster = cluster_of(&l, mode, record.as_deref());
    let ran = rt.block_on(async {
        watch_signals(interrupt.clone(), reporter.clone());
        run::run_all(
            mode,
            cluster,
            targets,
            opts,
            run::Io {
                connector: connect.clone(),
                reporter: reporter.clone(),
                interrupt: interrupt.clone(),
                record: record.clone(),
            },
        )
        .await
    });
    let reports = &ran.reports;
    // `verify --pods`: after the hosts' own checks, unless stopped
    let pod_results = (pods && !interrupt.is_set() && ran.locked.is_none()).then(|| {
        rt.block_on(super::pods::verify_pods(
            &l, &connect, &ran, &reporter, &interrupt, &selected,
        ))
    });
    let interrupted = interrupt.is_set();
    let failed = reports.iter().any(|r| r.status == HostStatus::Failed);
    let pods_failed = pod_results
        .as_ref()
        .is_some_and(|r| r.as_ref().map_or(true, |r| r.iter().any(|n| !n.ok)));
    let end = End {
        c,
        mode,
        l: &l,
        reporter: &reporter,
        record: record.as_deref(),
    };
    end.report(reports, interrupted || failed, interrupted, pod_results);
    for line in &ran.joined {
        err_line(line);
    }
    for h in &ran.forgotten {
        err_line(&format!(
            "{h}: reset; its block is no longer reserved for it"
        ));
    }
    if ran.cluster_reset {
        err_line(&format!(
            "reset: every node of the cluster is reset; the cluster's registry, generation and lock \
             on the control plane and the state file {} are removed: the next `kwinctl up` is a \
             first bring-up",
            l.sidecars.state.display()
        ));
    }
    rt.shutdown_timeout(Duration::from_millis(100));
    if let Some(why) = &ran.internal {
        err_line(&format!("error: {why}"));
        return Ok((Exit::Internal, 0));
    }
    let busy = reports
        .iter()
        .filter(|r| matches!(r.status, HostStatus::Pending | HostStatus::Changed))
        .count();
    // the hosts' lines are clipped: the lock's whole story once
    if let Some(l) = &ran.locked {
        err_line(&format!("error: {}", l.0));
    }
    // a run that lost its lock may have changed hosts under another's
    if let Some(why) = &ran.lost {
        err_line(&format!(
            "error: {why}. Another run may have changed the cluster meanwhile: run `kwinctl plan` \
             once no other run is changing it, then `kwinctl up` again"
        ));
    }
    let exit = match interrupt.exit_code() {
        Some(code) => Exit::Signal(code),
        None if ran.locked.is_some() => Exit::Locked,
        None if ran.lost.is_some() => Exit::HostFailed,
        None if failed || pods_failed => Exit::HostFailed,
        None => Exit::Ok,
    };
    Ok((exit, busy))
}

/// The run's beginning: with `-v` each host's route, and the run record.
/// A run that changes hosts needs one (it is what was sent): without it,
/// nothing is contacted and the run exits 4; `plan` and `verify` go on
/// with a warning.
fn start(
    c: &Common,
    mode: Mode,
    l: &Inputs,
    targets: &[Target],
    names: &[String],
    reporter: &Reporter,
) -> Result<Option<Arc<RunRecord>>, CliError> {
    if c.verbose {
        if mode == Mode::Up {
            reporter.say(&match super::upgrades_at_once(c.parallel) {
                1 => "upgrades: one Windows node at a time".to_string(),
                n => format!("upgrades: up to {n} Windows nodes at a time (--parallel {n})"),
            });
        }
        for t in targets.iter().filter(|t| t.selected) {
            if let Some(r) = &t.route {
                reporter.say(&format!("{}: {r}", t.host.name));
            }
        }
    }
    match RunRecord::start(&l.path, mode.name(), names) {
        Ok(r) => Ok(Some(Arc::new(r))),
        Err(e) if mode.changes_hosts() => Err(CliError::internal(anyhow::anyhow!(
            "cannot write the run record in {}: {e}. Nothing was changed: `kwinctl {mode}` keeps \
             a record of every script it sends; make that folder writable (or free space) and run \
             again",
            crate::state::Sidecars::of(&l.path).runs.display()
        ))),
        Err(e) => {
            reporter.say(&format!("warning: cannot write the run record: {e}"));
            Ok(None)
        }
    }
}

/// The end of a run: the summary (text or JSON), the run record closed,
/// and the lines that say what to do next.
struct End<'a> {
    c: &'a Common,
    mode: Mode,
    l: &'a Inputs,
    reporter: &'a Reporter,
    record: Option<&'a RunRecord>,
}

impl End<'_> {
    fn report(
        &self,
        reports: &[HostReport],
        show_record: bool,
        interrupted: bool,
        pod_results: Option<Result<Vec<crate::podcheck::NodePods>, String>>,
    ) {
        let l = self.l;
        let mut extra = serde_json::json!({"state_file": l.sidecars.state.display().to_string()});
        match &pod_results {
            Some(Ok(r)) => extra["pods"] = serde_json::to_value(r).unwrap_or_default(),
            Some(Err(e)) => extra["pods_error"] = serde_json::Value::from(e.as_str()),
            None => {}
        }
        let summary =
            crate::report::summary_json(self.reporter.summary(reports, interrupted, &extra));
        let run_dir = match self.record {
            Some(r) => r.finish(&l.path, &summary).map(|_| r.dir().to_path_buf()),
            None => Err(std::io::Error::other("see the warning above")),
        };
        self.reporter.finish(reports, interrupted, &summary);
        tell_max_fail(self.c, self.mode, reports);
        match run_dir {
            Ok(d) if show_record || self.c.verbose => err_line(&format!(
                "run record (scripts and outputs per host): {}",
                d.display()
            )),
            Ok(_) => {}
            Err(e) => err_line(&format!("warning: cannot write the run record: {e}")),
        }
    }
}

/// Every host of the run and how it is reached, before anything is
/// contacted: the inventory's hosts (every one is probed: the nodes'
/// records decide the allocation) and the removed hosts `want` names, each
/// with its desired state.
fn prepare(
    c: &Common,
    l: &Inputs,
    want: &BTreeSet<String>,
    selected: &dyn Fn(&str) -> bool,
) -> Result<(Arc<ConnectOptions>, Vec<Target>), CliError> {
    // Removed hosts are reached only by name.
    let mut hosts: Vec<(crate::inventory::Host, bool)> =
        l.inv.hosts.iter().map(|h| (h.clone(), false)).collect();
    let gone = removed(l);
    for name in want {
        if let Some(r) = gone.get(name) {
            let host = r
                .at()
                .and_then(|at| crate::removal::reach(&l.inv, name, &at))
                .ok_or_else(|| {
                    CliError::bad(format!(
                        "kwinctl does not know how to reach removed host {name} (the state file does \
                         not say where it is, or the inventory's defaults cannot reach it): add it back \
                         to the inventory, then `kwinctl reset --limit {name}`"
                    ))
                })?;
            hosts.push((host, true));
        }
    }
    let all: Vec<&crate::inventory::Host> = hosts.iter().map(|(h, _)| h).collect();
    l.inv.check_credentials(&all)?;
    // before the runtime's threads: it may set the Kerberos environment
    transport::kerberos::prepare(&all).map_err(CliError::bad)?;
    // Where and as whom each host is reached, as OpenSSH resolves it: a
    // config kwinctl cannot follow is bad input.
    let routes = transport::resolve(&all, &ConfigSource::from_arg(c.ssh_config.as_deref()))
        .map_err(|e| CliError::bad(format!("ssh config: {e}")))?;
    let connect = Arc::new(ConnectOptions::new(
        Duration::from_secs(c.timeout),
        c.accept_new_host_keys,
        routes,
    ));
    // A bad binary spec or an unreadable kubeconfig is bad input.
    let uploads = Uploads::default();
    let mut targets: Vec<Target> = Vec::new();
    for (h, removed) in hosts {
        targets.push(Target {
            desired: Desired::of(&l.inv, &h, &uploads)?,
            selected: selected(&h.name),
            removed,
            route: connect.routes.get(&h.name).map(|r| r.describe()),
            host: h,
        });
    }
    Ok((connect, targets))
}

/// The hosts removed from the inventory that may still hold their block
/// (noted by an earlier run, or deleted since the last `up`): what
/// `reset --limit NAME` reaches by name.
fn removed(l: &Inputs) -> std::collections::BTreeMap<String, crate::state::Removed> {
    l.state.removed_from(|k| l.inv.host(k).is_some())
}

/// The runtime of a run. A read-only sweep (`plan`, `verify`) is many
/// short exchanges: each host needs a millisecond or two of CPU between
/// waits on the network, and one thread does all of it without one thread
/// waking another for each event (bench/RESULTS.md, "fifth pass": less CPU,
/// the same wall time). `up` and `reset` keep a thread per core: a push
/// seals and hashes megabytes per host.
fn runtime(mode: Mode) -> Result<tokio::runtime::Runtime, CliError> {
    let mut b = if mode.changes_hosts() {
        tokio::runtime::Builder::new_multi_thread()
    } else {
        tokio::runtime::Builder::new_current_thread()
    };
    b.enable_all()
        // Blocking work is short file I/O (run records, key files): a few
        // threads are enough, and each thread costs memory (stack, malloc
        // arena) at hundreds of hosts.
        .max_blocking_threads(4)
        .build()
        .map_err(|e| CliError::internal(anyhow::anyhow!("cannot start the runtime: {e}")))
}

/// What the run shares with every host: the inventory, the state file and
/// who runs it.
fn cluster_of(l: &Inputs, mode: Mode, record: Option<&RunRecord>) -> run::Cluster {
    run::Cluster {
        inventory: Arc::new(l.inv.clone()),
        state: l.state.clone(),
        state_path: l.sidecars.state.clone(),
        owner: crate::lock::owner(),
        // the run record's name (readable), made unique by random bits:
        // two machines' runs never share an id
        run_id: crate::lock::run_id(
            &record
                .map(|r| {
                    r.dir()
                        .file_name()
                        .unwrap_or_default()
                        .to_string_lossy()
                        .into_owned()
                })
                .unwrap_or_else(|| mode.name().to_string()),
        ),
    }
}

/// `--max-fail` stopped the run: which hosts were not started, and how to
/// go on.
fn tell_max_fail(c: &Common, mode: Mode, reports: &[HostReport]) {
    let stopped: Vec<&str> = reports
        .iter()
        .filter(|r| matches!(r.error, Some(HostError::NotStarted { .. })))
        .map(|r| r.host.as_str())
        .collect();
    if stopped.is_empty() {
        return;
    }
    let why = match c.max_fail {
        Some(m) => format!("--max-fail {m} reached"),
        None => "--parallel 1 stops at the first failed host (--max-fail N lets it go on)".into(),
    };
    err_line(&format!(
        "{why}: not started: {}; once the failed hosts are fixed, \
         `kwinctl {mode} --only-failed` continues with the hosts left",
        stopped.join(", ")
    ));
}

/// SIGINT (Ctrl-C) and SIGTERM: the first stops new hosts from starting and
/// lets running hosts finish their current step; a second quits at once.
fn watch_signals(interrupt: Interrupt, reporter: Arc<Reporter>) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut int), Ok(mut term)) = (
        signal(SignalKind::interrupt()),
        signal(SignalKind::terminate()),
    ) else {
        reporter.say("warning: cannot watch for Ctrl-C / SIGTERM");
        return;
    };
    tokio::spawn(async move {
        loop {
            let (code, what) = tokio::select! {
                _ = int.recv() => (130, "interrupted"),
                _ = term.recv() => (143, "terminated"),
            };
            if interrupt.is_set() {
                std::process::exit(code);
            }
            interrupt.set(code);
            reporter.say(&format!(
                "{what}: no new host starts; running hosts stop after their current step (Ctrl-C again to quit now)"
            ));
        }
    });
}
