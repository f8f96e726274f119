//! The CLI: one function per subcommand. Exit codes: 0 all good; 1 a host
//! failed or verify found a problem; 2 bad input (nothing contacted); 130
//! interrupted.

use std::collections::HashSet;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, Parser, Subcommand};
use comfy_table::{Table, presets::UTF8_BORDERS_ONLY};

use kwinctl::inventory::{Host, Inventory, PasswordSource};
use kwinctl::lock::Lock;
use kwinctl::plan::{self, Allocation, NodePlan, State};
use kwinctl::record::{self, Redactor};
use kwinctl::render::Renderer;
use kwinctl::report::{Format, HostStatus, Reporter};
use kwinctl::run::{self, Interrupt, Mode, RunOptions, Target};
use kwinctl::transport::ConnectOptions;
use kwinctl::verify;

#[derive(Parser)]
#[command(
    name = "kwinctl",
    version,
    about = "Bootstrap Kubernetes clusters whose workers are Windows Server and Linux hosts",
    long_about = "kwinctl reads an inventory, assigns each node a pod CIDR, and converges every host \
                  over SSH (or WinRM): routes to every other node's pod CIDR, IP forwarding, and on \
                  Windows the HNS network, switch and services. `up` converges, `verify` checks."
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Offline: validate the inventory and print the pod CIDR plan. Contacts nothing.
    Check(Common),
    /// Offline: print the script each host would get on a fresh machine.
    Render {
        #[command(flatten)]
        common: Common,
        /// Only this host.
        #[arg(long)]
        host: Option<String>,
    },
    /// Connect, gather facts and print each host's actions. Changes nothing.
    Plan(Common),
    /// Converge every host, then verify.
    Up(Common),
    /// Read-only health sweep; exit 1 if anything is off.
    Verify(Common),
    /// Undo what `up` created on the hosts.
    Reset(Common),
}

#[derive(Args, Clone)]
struct Common {
    /// The inventory file.
    #[arg(short = 'i', long = "inventory", value_name = "INV")]
    inventory: PathBuf,
    /// Only these hosts (comma-separated names).
    #[arg(long, value_delimiter = ',', value_name = "HOST,..")]
    limit: Vec<String>,
    /// How many hosts at once.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=4096))]
    parallel: u32,
    /// Bound, in seconds, on connecting to a host and on each remote call.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=86400))]
    timeout: u64,
    /// Retries of transient connection failures (never of host-key or auth failures).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(0..=10))]
    retries: u32,
    #[arg(long, value_enum, default_value_t = Format::Text)]
    output: Format,
    /// Trust and record host keys not yet in known_hosts (trust on first use).
    #[arg(long)]
    accept_new_host_keys: bool,
    /// OpenSSH client config to honour (HostName, Port, User, IdentityFile).
    #[arg(long, value_name = "FILE", env = "KWINCTL_SSH_CONFIG")]
    ssh_config: Option<PathBuf>,
    /// Reachability checks: `all` (every node pings every other), `none`, or
    /// N (each node pings its N ring neighbours in address order, and is
    /// pinged by N). Default: the full mesh up to 16 peers, 4 neighbours beyond.
    #[arg(long, value_name = "all|none|N", value_parser = parse_reach)]
    reach: Option<verify::ReachMode>,
    /// Only the hosts that failed (or were interrupted) in the last recorded run.
    #[arg(long, conflicts_with = "limit")]
    only_failed: bool,
    /// More progress detail.
    #[arg(short, long)]
    verbose: bool,
}

fn parse_reach(s: &str) -> Result<verify::ReachMode, String> {
    match s {
        "all" => Ok(verify::ReachMode::All),
        "none" => Ok(verify::ReachMode::None),
        n => n
            .parse::<usize>()
            .ok()
            .filter(|n| *n > 0)
            .map(verify::ReachMode::Ring)
            .ok_or_else(|| format!("{n:?}: give all, none or a number of peers")),
    }
}

/// Bad input: print it and exit 2 without contacting anything.
struct BadInput(String);

impl<E: std::fmt::Display> From<E> for BadInput {
    fn from(e: E) -> Self {
        BadInput(e.to_string())
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Check(c) => cmd_check(&c),
        Command::Render { common, host } => cmd_render(&common, host.as_deref()),
        Command::Plan(c) => cmd_remote(&c, Mode::Plan),
        Command::Up(c) => cmd_remote(&c, Mode::Up),
        Command::Verify(c) => cmd_remote(&c, Mode::Verify),
        Command::Reset(c) => cmd_remote(&c, Mode::Reset),
    };
    match result {
        Ok(code) => code,
        Err(BadInput(msg)) => {
            eprintln!("error: {msg}");
            ExitCode::from(2)
        }
    }
}

struct Loaded {
    inv: Inventory,
    /// The state file as read, before this run's allocation.
    state: State,
    alloc: Allocation,
    plans: Vec<NodePlan>,
    state_path: PathBuf,
}

fn load(c: &Common) -> Result<Loaded, BadInput> {
    let inv = Inventory::load(&c.inventory)?;
    let state_path = plan::state_path(&c.inventory);
    let state = State::load(&state_path)?;
    let alloc = plan::allocate(&inv, &state)?;
    let plans = plan::node_plans(&inv, &alloc);
    Ok(Loaded {
        inv,
        state,
        alloc,
        plans,
        state_path,
    })
}

/// The hosts selected by --limit (all when empty); unknown names are bad input.
fn selected<'a>(
    l: &'a Loaded,
    limit: &[String],
) -> Result<Vec<(&'a Host, &'a NodePlan)>, BadInput> {
    let want: HashSet<String> = limit
        .iter()
        .map(|s| s.trim().to_ascii_lowercase())
        .collect();
    for w in &want {
        if l.inv.host(w).is_none() {
            let names: Vec<&str> = l.inv.hosts.iter().map(|h| h.name.as_str()).collect();
            return Err(BadInput(format!(
                "--limit names {w:?}, which is not in {}; hosts are: {}",
                l.inv.path.display(),
                names.join(", ")
            )));
        }
    }
    Ok(l.inv
        .hosts
        .iter()
        .zip(&l.plans)
        .filter(|(h, _)| want.is_empty() || want.contains(&h.name.to_ascii_lowercase()))
        .collect())
}

fn cmd_check(c: &Common) -> Result<ExitCode, BadInput> {
    let l = load(c)?;
    selected(&l, &c.limit)?;
    let cl = &l.inv.cluster;
    if c.output == Format::Json {
        let v = serde_json::json!({
            "event": "summary", "command": "check", "ok": true,
            "cluster": { "name": cl.name, "cluster_cidr": cl.cluster_cidr.to_string(),
                         "node_prefix": cl.node_prefix, "service_cidr": cl.service_cidr.to_string() },
            "hosts": l.alloc.assignments, "notes": l.alloc.notes,
        });
        println!("{v}");
        return Ok(ExitCode::SUCCESS);
    }
    let mut out = std::io::stdout().lock();
    let _ = writeln!(
        out,
        "{}: inventory OK — cluster {} ({} hosts), cluster CIDR {} (/{} per node), service CIDR {}",
        l.inv.path.display(),
        cl.name,
        l.inv.hosts.len(),
        cl.cluster_cidr,
        cl.node_prefix,
        cl.service_cidr
    );
    let mut t = Table::new();
    t.load_style(UTF8_BORDERS_ONLY);
    t.set_header([
        "HOST",
        "OS",
        "ROLE",
        "ROUTABLE IP",
        "POD CIDR",
        "GATEWAY",
        "SOURCE",
    ]);
    for (h, a) in l.inv.hosts.iter().zip(&l.alloc.assignments) {
        t.add_row([
            h.name.clone(),
            h.os.to_string(),
            format!("{:?}", h.role)
                .to_lowercase()
                .replace("controlplane", "control-plane"),
            h.address.to_string(),
            a.pod_cidr.to_string(),
            a.gateway.to_string(),
            match a.source {
                plan::Source::Pinned => "pinned",
                plan::Source::Recorded => "recorded",
                plan::Source::New => "new",
            }
            .to_string(),
        ]);
    }
    let _ = writeln!(out, "{t}");
    for n in &l.alloc.notes {
        let _ = writeln!(out, "note: {n}");
    }
    if l.alloc
        .assignments
        .iter()
        .any(|a| a.source == plan::Source::New)
    {
        let _ = writeln!(
            out,
            "new assignments are recorded in {} by the next `kwinctl up`",
            l.state_path.display()
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn cmd_render(c: &Common, only: Option<&str>) -> Result<ExitCode, BadInput> {
    let l = load(c)?;
    let limit: Vec<String> = only
        .map(|h| vec![h.to_string()])
        .unwrap_or_else(|| c.limit.clone());
    let r = Renderer::new();
    let mut out = std::io::stdout().lock();
    for (h, node) in selected(&l, &limit)? {
        let _ = writeln!(
            out,
            "# ===== {} ({}, {}, pod CIDR {}) =====",
            h.name, h.os, h.address, node.pod_cidr
        );
        let script = kwinctl::render::fresh_script(&r, &l.inv, h, node).map_err(BadInput)?;
        let _ = write!(out, "{script}");
        let _ = writeln!(out);
    }
    Ok(ExitCode::SUCCESS)
}

/// Every secret value this run could see, for redaction.
fn secrets(inv: &Inventory) -> Redactor {
    let mut v: Vec<String> = Vec::new();
    if let Ok(p) = std::env::var(kwinctl::transport::ssh::PASSPHRASE_ENV) {
        v.push(p);
    }
    for h in &inv.hosts {
        if let kwinctl::inventory::Connection::WinRm(w) = &h.connection {
            match &w.password {
                PasswordSource::Env(var) => v.extend(std::env::var(var).ok()),
                PasswordSource::File(f) => v.extend(
                    std::fs::read_to_string(f)
                        .ok()
                        .map(|s| s.trim().to_string()),
                ),
            }
        }
    }
    Redactor::new(v)
}

fn cmd_remote(c: &Common, mode: Mode) -> Result<ExitCode, BadInput> {
    // One operator at a time for commands that change hosts; taken before
    // the state file is read, so the allocation never starts from a stale one.
    // (A missing inventory is reported by `load` below as bad input.)
    let _lock = if matches!(mode, Mode::Up | Mode::Reset) && c.inventory.is_file() {
        match Lock::acquire(&c.inventory, mode.name()) {
            Ok(l) => Some(l),
            Err(e) => {
                eprintln!("error: {e}");
                return Ok(ExitCode::from(1));
            }
        }
    } else {
        None
    };
    let l = load(c)?;
    let mut limit = c.limit.clone();
    if c.only_failed {
        let last = record::load_last(&c.inventory)?;
        limit = last.failed.into_iter().chain(last.interrupted).collect();
        limit.retain(|h| l.inv.host(h).is_some());
        if limit.is_empty() {
            eprintln!(
                "--only-failed: the last run ({}) had no failed hosts: nothing to do",
                last.command
            );
            return Ok(ExitCode::SUCCESS);
        }
        eprintln!("--only-failed: {}", limit.join(", "));
    }
    let chosen = selected(&l, &limit)?;
    let hosts: Vec<&Host> = chosen.iter().map(|(h, _)| *h).collect();
    l.inv.check_credentials(&hosts)?;
    let ssh_config = c
        .ssh_config
        .clone()
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".ssh").join("config")));
    let connect = ConnectOptions::new(
        Duration::from_secs(c.timeout),
        c.accept_new_host_keys,
        ssh_config,
    )?;
    // Desired state is computed before anything is contacted: a bad binary
    // spec or an unreadable kubeconfig is bad input.
    let mut targets: Vec<Target> = Vec::new();
    let uploads = plan::Uploads::default();
    for (h, n) in &chosen {
        let windows = match h.os {
            kwinctl::inventory::Os::Windows => {
                Some(plan::windows_desired(&l.inv, h, n, &uploads).map_err(BadInput)?)
            }
            kwinctl::inventory::Os::Linux => None,
        };
        targets.push(Target {
            host: (*h).clone(),
            node: (*n).clone(),
            windows,
        });
    }
    let reporter = Arc::new(Reporter::new(
        c.output,
        mode.name(),
        targets.len(),
        c.verbose,
    ));
    for n in &l.alloc.notes {
        reporter.say(&format!("note: {n}"));
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
            new.save(&l.state_path)
                .map_err(|e| BadInput(format!("{e:#}")))?;
        }
    }
    let record = match record::RunRecord::start(&c.inventory, mode.name(), secrets(&l.inv)) {
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
        .map_err(|e| BadInput(format!("cannot start the runtime: {e}")))?;
    let opts = RunOptions {
        parallel: c.parallel as usize,
        reach: c.reach.unwrap_or(verify::ReachMode::Auto),
        timeout: Duration::from_secs(c.timeout),
        retries: c.retries,
        connect,
    };
    let reports = rt.block_on(async {
        let irq = interrupt.clone();
        let rep = reporter.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                irq.set();
                rep.say("interrupted: no new host starts; running hosts stop after their current step (Ctrl-C again to quit now)");
                if tokio::signal::ctrl_c().await.is_ok() {
                    std::process::exit(130);
                }
            }
        });
        run::run_all(
            mode,
            targets,
            opts,
            reporter.clone(),
            interrupt.clone(),
            record.clone(),
        )
        .await
    });
    let interrupted = interrupt.is_set();
    let extra = serde_json::json!({"state_file": l.state_path.display().to_string()});
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
        Ok(d) if failed || interrupted || c.verbose => {
            eprintln!("run record (scripts and outputs per host): {}", d.display())
        }
        Ok(_) => {}
        Err(e) => eprintln!("warning: cannot write the run record: {e}"),
    }
    rt.shutdown_timeout(Duration::from_millis(100));
    if interrupted {
        return Ok(ExitCode::from(130));
    }
    Ok(if failed {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}
