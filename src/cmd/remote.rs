//! `plan`, `up`, `verify`, `reset`: lock → load → select → desired state →
//! record the allocation (`up`) → run on every host → summary.

use std::sync::Arc;
use std::time::Duration;

use super::{Common, load, selected};
use crate::error::{CliError, Exit};
use crate::inventory::{Connection, Inventory};
use crate::lock::Lock;
use crate::mode::Mode;
use crate::os::{Desired, windows::Uploads};
use crate::outcome::HostStatus;
use crate::record::{self, Redactor, RunRecord};
use crate::report::{Reporter, err_line};
use crate::run::{self, Interrupt, RunOptions, Target};
use crate::transport::{self, ConfigSource, ConnectOptions};
use crate::verify::ReachMode;

/// Every secret value this run could see, for redaction.
fn secrets(inv: &Inventory) -> Redactor {
    let mut v: Vec<String> = Vec::new();
    if let Ok(p) = std::env::var(crate::transport::ssh::PASSPHRASE_ENV) {
        v.push(p);
    }
    for h in &inv.hosts {
        if let Connection::WinRm(w) = &h.connection {
            v.extend(w.password.read().ok());
        }
    }
    Redactor::new(v)
}

pub fn remote(c: &Common, mode: Mode) -> Result<Exit, CliError> {
    // One operator at a time for commands that change hosts; taken before
    // the state file is read, so the allocation never starts from a stale
    // one. (A missing inventory is reported by `load` below as bad input.)
    let _lock = if mode.changes_hosts() && c.inventory.is_file() {
        Some(Lock::acquire(&c.inventory, mode.name())?)
    } else {
        None
    };
    let l = load(c)?;
    let mut limit = c.limit.clone();
    if c.only_failed {
        let last = record::load_last(&c.inventory).map_err(CliError::bad)?;
        limit = last.failed.into_iter().chain(last.interrupted).collect();
        limit.retain(|h| l.inv.host(h).is_some());
        if limit.is_empty() {
            err_line(&format!(
                "--only-failed: the last run ({}) had no failed hosts: nothing to do",
                last.command
            ));
            return Ok(Exit::Ok);
        }
        err_line(&format!("--only-failed: {}", limit.join(", ")));
    }
    let chosen = selected(&l, &limit)?;
    let hosts: Vec<_> = chosen.iter().map(|(h, _)| *h).collect();
    l.inv.check_credentials(&hosts)?;
    // Where and as whom each host is reached, as OpenSSH resolves it, before
    // anything is contacted: a config kwinctl cannot follow is bad input.
    let routes = transport::resolve(&hosts, &ConfigSource::from_arg(c.ssh_config.as_deref()))
        .map_err(|e| CliError::bad(format!("ssh config: {e}")))?;
    let connect = ConnectOptions::new(
        Duration::from_secs(c.timeout),
        c.accept_new_host_keys,
        routes,
    );
    // Desired state is computed before anything is contacted: a bad binary
    // spec or an unreadable kubeconfig is bad input.
    let renderer = crate::os::renderer();
    let uploads = Uploads::default();
    let mut targets: Vec<Target> = Vec::new();
    for (h, n) in &chosen {
        targets.push(Target {
            host: (*h).clone(),
            node: (*n).clone(),
            desired: Desired::of(&l.inv, h, n, &renderer, &uploads)?,
            route: connect.routes.get(&h.name).map(|r| r.describe()),
        });
    }
    drop(renderer);
    let reporter = Arc::new(Reporter::new(c.output, mode, targets.len(), c.verbose));
    for n in &l.alloc.notes {
        reporter.say(&format!("note: {n}"));
    }
    if c.verbose {
        for t in &targets {
            if let Some(r) = &t.route {
                reporter.say(&format!("{}: {r}", t.host.name));
            }
        }
    }
    if mode == Mode::Up {
        // Record assignments before touching any host, so a host never holds
        // a CIDR the state file does not know.
        let old = &l.state;
        let mut new = l.alloc.state.clone();
        if !limit.is_empty() {
            // Hosts outside --limit keep what was recorded for them.
            for (k, v) in &old.pod_cidrs {
                if l.inv.host(k).is_some() {
                    new.pod_cidrs.entry(k.clone()).or_insert(*v);
                }
            }
        }
        if new != *old {
            new.save(&l.sidecars.state)?;
        }
    }
    let record = match RunRecord::start(&c.inventory, mode.name(), secrets(&l.inv)) {
        Ok(r) => Some(Arc::new(r)),
        Err(e) => {
            reporter.say(&format!("warning: cannot write the run record: {e}"));
            None
        }
    };
    let interrupt = Interrupt::default();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        // Blocking work is short file I/O (run records, key files): a few
        // threads are enough, and each thread costs memory (stack, malloc
        // arena) at hundreds of hosts.
        .max_blocking_threads(4)
        .build()
        .map_err(|e| CliError::internal(anyhow::anyhow!("cannot start the runtime: {e}")))?;
    let opts = RunOptions {
        parallel: c.parallel as usize,
        reach: c.reach.unwrap_or(ReachMode::Auto),
        timeout: Duration::from_secs(c.timeout),
        retries: c.retries,
    };
    let reports = rt.block_on(async {
        watch_signals(interrupt.clone(), reporter.clone());
        run::run_all(
            mode,
            targets,
            opts,
            Arc::new(connect),
            reporter.clone(),
            interrupt.clone(),
            record.clone(),
        )
        .await
    });
    let interrupted = interrupt.is_set();
    let extra = serde_json::json!({"state_file": l.sidecars.state.display().to_string()});
    let summary = reporter.summary(&reports, interrupted, &extra);
    let run_dir = match &record {
        Some(r) => r
            .finish(&c.inventory, mode.name(), &reports, &summary)
            .map(|_| r.dir().to_path_buf()),
        None => Err(std::io::Error::other("see the warning above")),
    };
    reporter.finish(&reports, interrupted, &summary);
    let failed = reports.iter().any(|r| r.status == HostStatus::Failed);
    match run_dir {
        Ok(d) if failed || interrupted || c.verbose => err_line(&format!(
            "run record (scripts and outputs per host): {}",
            d.display()
        )),
        Ok(_) => {}
        Err(e) => err_line(&format!("warning: cannot write the run record: {e}")),
    }
    rt.shutdown_timeout(Duration::from_millis(100));
    Ok(match interrupt.exit_code() {
        Some(code) => Exit::Signal(code),
        None if failed => Exit::HostFailed,
        None => Exit::Ok,
    })
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
