//! The commands' bodies, one file each; `main.rs` only parses the command
//! line and turns the outcome into an exit code.

mod check;
pub mod graph;
pub mod init;
pub mod man;
mod pods;
mod remote;
mod render;
mod reset;
mod unlock;

use std::path::PathBuf;

use clap::Args;

pub use check::check;
pub use graph::graph;
pub use init::init;
pub use remote::{remote, verify};
pub use render::render;
pub use reset::reset;
pub use unlock::unlock;

use crate::alloc::{self, Allocation, Node};
use crate::error::CliError;
use crate::inventory::{Host, Inventory};
use crate::report::Format;
use crate::state::{Sidecars, State};
use crate::verify::ReachMode;

/// Help headings of the options every remote command shares.
const SELECTION: &str = "Which hosts";
const CONNECTION: &str = "Connecting";
const CHANGES: &str = "Changing hosts (up, reset)";
const OUTPUT: &str = "Output";

/// `--parallel`'s default (for connecting and changing hosts; kubelet
/// upgrades go one node at a time unless `--parallel` is given).
pub const DEFAULT_PARALLEL: u32 = 256;

/// How many Windows nodes `up` upgrades at once: one, unless `--parallel`
/// was given (any value, 256 too: an explicit value is honoured).
pub fn upgrades_at_once(parallel: Option<u32>) -> usize {
    parallel.map_or(1, |p| p.max(1) as usize)
}

#[derive(Args, Clone)]
pub struct Common {
    /// The inventory file.
    #[arg(short = 'i', long = "inventory", value_name = "INV")]
    pub inventory: PathBuf,
    /// Only these hosts, as Ansible's patterns: names, groups (declared, or
    /// linux, windows, control-plane, worker), globs (web*), !exclusions,
    /// &intersections, @FILE (one per line); separated by commas, or colons:
    /// --limit 'web*:!web3'. A pattern that matches nothing is an error.
    #[arg(long, value_name = "PATTERN,..", help_heading = SELECTION)]
    pub limit: Vec<String>,
    /// How many hosts at once [default: 256] (`up` upgrades the kubelet of
    /// one Windows node at a time unless this is given, even as 256).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=4096), help_heading = CONNECTION)]
    pub parallel: Option<u32>,
    /// Bound, in seconds, on connecting to a host and on each remote call.
    #[arg(long, default_value_t = 60, value_parser = clap::value_parser!(u64).range(1..=86400), help_heading = CONNECTION)]
    pub timeout: u64,
    /// Retries of transient connection failures (never of host-key or auth failures).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(0..=10), help_heading = CONNECTION)]
    pub retries: u32,
    /// How the results are printed: `text` for people (progress on
    /// stderr, a table on stdout), `json` for programs (one JSON event per
    /// line on stdout, the summary last; `kwinctl schema events`).
    #[arg(long, value_enum, default_value_t = Format::Text, value_name = "FORMAT", help_heading = OUTPUT)]
    pub output: Format,
    /// Trust and record host keys not yet in known_hosts (trust on first use).
    #[arg(long, help_heading = CONNECTION)]
    pub accept_new_host_keys: bool,
    /// OpenSSH client config, read as `ssh -F FILE` reads it (`none`: no
    /// config). Default: ~/.ssh/config and /etc/ssh/ssh_config, as `ssh`.
    #[arg(long, value_name = "FILE|none", env = "KWINCTL_SSH_CONFIG", help_heading = CONNECTION)]
    pub ssh_config: Option<PathBuf>,
    /// Reachability checks: `all` (every node pings every other), `none`, or
    /// N (each node pings its N ring neighbours in address order, and is
    /// pinged by N). Default: the full mesh up to 16 peers, 4 neighbours beyond.
    #[arg(long, value_name = "all|none|N", value_parser = parse_reach, help_heading = CONNECTION)]
    pub reach: Option<ReachMode>,
    /// Only the hosts the last `up` (for `reset`: the last `reset`) did not
    /// get done: failed, interrupted, or never finished.
    #[arg(long, conflicts_with = "limit", help_heading = SELECTION)]
    pub only_failed: bool,
    /// `up` and `reset`: once N selected hosts (or P% of them, rounded up)
    /// have failed, no further host starts changing anything (a rolling
    /// change with `--parallel 1`); those are reported not started.
    #[arg(long, value_name = "N|P%", value_parser = parse_max_fail, help_heading = CHANGES)]
    pub max_fail: Option<MaxFail>,
    /// With `up --limit`: also make the route changes the other hosts need
    /// to reach a new or moved node (instead of failing them).
    #[arg(long, help_heading = CHANGES)]
    pub with_peer_routes: bool,
    /// `up`: a Windows host that needs a restart before kwinctl can go on
    /// (a feature it installed waits for it) is restarted, and `up` goes on
    /// with it once it is back (bounded: 15 minutes).
    #[arg(long, help_heading = CHANGES)]
    pub reboot: bool,
    /// `up`: how long, in seconds, kwinctl waits for the result of a step
    /// that drops the host's network (creating a Windows node's first HNS
    /// network moves its address onto the new vSwitch), reconnecting to
    /// read it; that step runs detached from the connection.
    #[arg(long, value_name = "SECS", default_value_t = 300, value_parser = clap::value_parser!(u64).range(1..=86400), help_heading = CHANGES)]
    pub detach_wait: u64,
    /// `up`: let a Windows node get an older Kubernetes release than its
    /// kubelet runs (a downgrade, refused without it); the version skew
    /// policy against kube-apiserver still holds.
    #[arg(long, help_heading = CHANGES)]
    pub allow_downgrade: bool,
    /// `up`: `verify --pods` on each Windows node it upgrades, once the
    /// node is Ready at the new release and before it is uncordoned (one
    /// test pod pinned to that node: its IP, the cluster DNS); a failure is
    /// rolled back like a kubelet that never got Ready, the node left
    /// cordoned. Needs kubectl on the control plane.
    #[arg(long, help_heading = CHANGES)]
    pub verify_pods: bool,
    /// `up`: accept the cluster CA whose pin (`sha256:<hex>` of its public
    /// key, as kubeadm's --discovery-token-ca-cert-hash) is this, in place
    /// of the one the state file pinned: for a CA rotated on purpose.
    #[arg(long, value_name = "PIN", help_heading = CHANGES)]
    pub accept_ca: Option<String>,
    /// More progress detail.
    #[arg(short, long, help_heading = OUTPUT)]
    pub verbose: bool,
}

/// `--max-fail`: a number of hosts, or a share of the selected ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MaxFail {
    Hosts(usize),
    Percent(u32),
}

impl MaxFail {
    /// How many failed hosts stop the run, out of `selected` (a share is
    /// rounded up, and is at least 1).
    pub fn threshold(self, selected: usize) -> usize {
        match self {
            MaxFail::Hosts(n) => n,
            MaxFail::Percent(p) => (selected * p as usize).div_ceil(100).max(1),
        }
    }
}

impl std::fmt::Display for MaxFail {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MaxFail::Hosts(n) => write!(f, "{n}"),
            MaxFail::Percent(p) => write!(f, "{p}%"),
        }
    }
}

fn parse_max_fail(s: &str) -> Result<MaxFail, String> {
    let bad = || format!("{s:?}: give a number of hosts (1 or more) or a percentage (1% to 100%)");
    match s.strip_suffix('%') {
        Some(p) => p
            .parse::<u32>()
            .ok()
            .filter(|p| (1..=100).contains(p))
            .map(MaxFail::Percent)
            .ok_or_else(bad),
        None => s
            .parse::<usize>()
            .ok()
            .filter(|n| *n > 0)
            .map(MaxFail::Hosts)
            .ok_or_else(bad),
    }
}

fn parse_reach(s: &str) -> Result<ReachMode, String> {
    match s {
        "all" => Ok(ReachMode::All),
        "none" => Ok(ReachMode::None),
        n => n
            .parse::<usize>()
            .ok()
            .filter(|n| *n > 0)
            .map(ReachMode::Ring)
            .ok_or_else(|| format!("{n:?}: give all, none or a number of peers")),
    }
}

/// What a remote command starts from: the inventory and the state file as
/// read. Its allocation is made once, from what the nodes record (`run`).
struct Inputs {
    inv: Inventory,
    /// The inventory's real path (symlinks resolved): the files kwinctl
    /// keeps beside it, and its lock, are named after it.
    path: PathBuf,
    /// The state file as read.
    state: State,
    sidecars: Sidecars,
}

/// The inputs, and the allocation the state and the pins give (what
/// `check`, `graph` and `render` show: they ask no node).
struct Loaded {
    inv: Inventory,
    alloc: Allocation,
    nodes: Vec<Node>,
    sidecars: Sidecars,
}

/// Register every secret the run can see before anything is printed: the
/// key passphrase, the WinRM passwords, the kubeconfig (the file kwinctl
/// uploads, and the tokens and keys in it).
fn register_secrets(inv: &Inventory) {
    let mut short = false;
    let mut add = |s: &str| {
        short |= s.chars().count() < 8;
        crate::secret::register(s);
    };
    if let Ok(p) = std::env::var(crate::transport::ssh::PASSPHRASE_ENV) {
        add(&p);
    }
    for h in &inv.hosts {
        if let crate::inventory::Connection::WinRm(w) = &h.connection
            && let Ok(p) = w.password.read()
        {
            add(&p);
        }
    }
    if let Some(kc) = &inv.cluster.kubeconfig
        && let Ok(bytes) = crate::inventory::kubeconfig::read(kc)
    {
        crate::secret::register_file(&bytes, crate::os::windows::KUBECONFIG);
        for s in crate::secret::in_kubeconfig(&String::from_utf8_lossy(&bytes)) {
            add(&s);
        }
    }
    if short {
        crate::report::err_line(
            "warning: a secret (a password, passphrase or token) is shorter than 8 characters: \
             everything in the output that equals it is masked",
        );
    }
}

/// [`crate::report::emit`] for a command: a lost output is exit 4 (this
/// machine could not do kwinctl's own work), saying so.
fn emit(bytes: &[u8]) -> Result<(), CliError> {
    crate::report::emit(bytes).map_err(|e| {
        CliError::internal(anyhow::anyhow!(
            "cannot write the output to stdout: {e}; what was written is incomplete"
        ))
    })
}

/// The inventory's real path: two paths to one inventory (a symlink, `..`)
/// share one state file and one lock.
fn real_path(inventory: &std::path::Path) -> PathBuf {
    std::fs::canonicalize(inventory).unwrap_or_else(|_| inventory.to_path_buf())
}

fn read(c: &Common) -> Result<Inputs, CliError> {
    let mut inv = Inventory::load(&c.inventory)?;
    crate::os::check_inventory(&inv)?;
    let path = real_path(&c.inventory);
    let sidecars = Sidecars::of(&path);
    let state = State::load(&sidecars.state, &inv.cluster.name)?;
    // a node already registered keeps its name (docs/windows.md, Node names)
    crate::identity::name::keep(&mut inv, &state);
    Ok(Inputs {
        inv,
        path,
        state,
        sidecars,
    })
}

/// The inputs of a remote command, refused before any host is contacted
/// when they cannot give every host a block.
fn load_remote(c: &Common) -> Result<Inputs, CliError> {
    let i = read(c)?;
    alloc::validate(&i.inv, &i.state)?;
    Ok(i)
}

/// The inputs of a command that asks no node, allocated from the state
/// file and the pins.
fn load(c: &Common) -> Result<Loaded, CliError> {
    let Inputs {
        inv,
        state,
        sidecars,
        ..
    } = read(c)?;
    let alloc = alloc::allocate(&inv, &state, &None)?;
    let nodes = alloc::nodes(&inv, &alloc);
    Ok(Loaded {
        inv,
        alloc,
        nodes,
        sidecars,
    })
}

/// The hosts selected by --limit (all without it), in inventory order.
fn selected<'a>(l: &'a Loaded, limit: &[String]) -> Result<Vec<(&'a Host, &'a Node)>, CliError> {
    let want = crate::select::resolve(&l.inv, &[], limit).map_err(CliError::bad)?;
    Ok(l.inv
        .hosts
        .iter()
        .zip(&l.nodes)
        .filter(|(h, _)| {
            want.as_ref()
                .is_none_or(|w| w.contains(&h.name.to_ascii_lowercase()))
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn max_fail_is_a_count_or_a_share_rounded_up() {
        assert_eq!(parse_max_fail("2"), Ok(MaxFail::Hosts(2)));
        assert_eq!(parse_max_fail("30%"), Ok(MaxFail::Percent(30)));
        for bad in ["0", "0%", "101%", "-1", "x", "%"] {
            assert!(parse_max_fail(bad).is_err(), "{bad}");
        }
        assert_eq!(MaxFail::Hosts(2).threshold(10), 2);
        assert_eq!(MaxFail::Percent(30).threshold(10), 3);
        assert_eq!(MaxFail::Percent(25).threshold(10), 3);
        assert_eq!(MaxFail::Percent(1).threshold(10), 1);
        assert_eq!(MaxFail::Percent(100).threshold(4), 4);
    }

    #[test]
    fn upgrades_go_one_at_a_time_unless_parallel_is_given() {
        assert_eq!(upgrades_at_once(None), 1);
        assert_eq!(upgrades_at_once(Some(DEFAULT_PARALLEL)), 256);
        assert_eq!(upgrades_at_once(Some(2)), 2);
    }
}
