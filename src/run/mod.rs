//! The fan-out, in two phases with the cluster between them:
//!
//! 1. every host of the inventory (not only those selected with `--limit`)
//!    is connected to and probed: the probe carries the reachability pings
//!    of the selected hosts, and reports what the node records about
//!    itself;
//! 2. the cluster step (`coordinate.rs`) allocates pod CIDRs from those
//!    records (`alloc`), records the allocation (`up`), and — when some
//!    host has changes to make — takes the cluster lock on the lock host;
//! 3. each host, on the connection it already has, runs its command's flow
//!    (`plan.rs`, `verify.rs`, `converge.rs`, `reset.rs`; hosts outside
//!    `--limit`: `peers.rs`), built from the steps in `step.rs`; checks
//!    across hosts are `cluster.rs`.
//!
//! A converged host is still one remote call: its probe.

mod cluster;
mod converge;
mod coordinate;
mod decide;
mod detach;
mod host;
mod interrupt;
mod joining;
mod lease;
mod ledger;
mod peers;
mod plan;
mod recheck;
mod reset;
mod settle;
mod skew;
mod step;
mod upgrade;
mod upgrade_resume;
mod verify;

#[cfg(test)]
mod tests;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};

use crate::alloc::Allocation;
use crate::inventory::{Host, Inventory, Role};
use crate::mode::Mode;
use crate::os::Desired;
use crate::outcome::{HostError, HostReport};
use crate::record::RunRecord;
use crate::render::Renderer;
use crate::report::Reporter;
use crate::state::State;
use crate::transport::{self, ConnectOptions, Interpreter, Session, TransportError};
use crate::verify::ReachMode;

pub use coordinate::Locked;
pub use interrupt::Interrupt;

pub struct RunOptions {
    pub parallel: usize,
    /// Which peers each node pings when checking.
    pub reach: ReachMode,
    /// Bound on each remote call (connect, probe, apply).
    pub timeout: Duration,
    pub retries: u32,
    /// `up --limit`: also make the route changes the hosts outside the
    /// limit need (instead of failing them).
    pub with_peer_routes: bool,
    /// `up --reboot`: restart a host that needs it and go on.
    pub reboot: bool,
    /// `up --allow-downgrade`: a Windows node may get an older kubelet than
    /// it runs.
    pub allow_downgrade: bool,
    /// `up --accept-ca`: the CA pin accepted in place of the state file's.
    pub accept_ca: Option<String>,
    /// `up`: how many Windows nodes' kubelets are upgraded at once (1
    /// unless `--parallel` was given).
    pub upgrade_parallel: usize,
    /// `up --verify-pods`: each upgraded node's test pod is checked before
    /// it is uncordoned (`upgrade/pods.rs`).
    pub upgrade_pods: bool,
    /// `--max-fail`: once this many selected hosts have failed, no host
    /// starts changing anything.
    pub max_fail: Option<usize>,
    /// `up`: how long kwinctl waits, reconnecting, for the result of an
    /// action run detached from the connection (`--detach-wait`).
    pub detach_wait: Duration,
    /// The cluster lock's lease (`KWINCTL_LOCK_LEASE`): renewed a third of
    /// it apart, lost when the lock host has not confirmed it for a whole
    /// one.
    pub lease: Duration,
}

/// How sessions are opened: the real transports, or a fake in unit tests.
pub trait Connector: Send + Sync {
    fn connect<'a>(
        &'a self,
        host: &'a Host,
        interpreter: Interpreter,
        trace: &'a transport::Trace,
    ) -> BoxFuture<'a, Result<Box<dyn Session>, TransportError>>;
}

impl Connector for ConnectOptions {
    fn connect<'a>(
        &'a self,
        host: &'a Host,
        interpreter: Interpreter,
        trace: &'a transport::Trace,
    ) -> BoxFuture<'a, Result<Box<dyn Session>, TransportError>> {
        Box::pin(transport::connect_traced(host, interpreter, self, trace))
    }
}

/// One host of the run.
pub struct Target {
    pub host: Host,
    pub desired: Desired,
    /// Selected by `--limit` (all, without it): its command's flow runs and
    /// it is reported. The others are probed (their records decide the
    /// allocation) and checked for the routes the run's changes need.
    pub selected: bool,
    /// A host removed from the inventory (reached by `reset` by name).
    pub removed: bool,
    /// How the host is reached (`ssh user@address:port via ...`), shown by
    /// `plan`, `-v` and the run record.
    pub route: Option<String>,
}

impl Target {
    /// The host's report before anything is known; `pod_cidr`: the block
    /// it is thought to have, `None` when that is not known yet (the
    /// report then says the block is pending).
    fn blank(&self, pod_cidr: Option<ipnet::Ipv4Net>, cluster: &Inventory) -> HostReport {
        let cc = cluster.cluster.cluster_cidr;
        let mut r = HostReport::new(
            &self.host.name,
            self.host.os,
            self.host.address,
            pod_cidr.unwrap_or(cc),
        );
        r.pod_cidr_pending = pod_cidr.is_none();
        r.route = self.route.clone();
        r.node_name =
            (self.host.os == crate::inventory::Os::Windows).then(|| self.host.node_name());
        r
    }
}

/// What the run knows of the cluster before asking any node.
pub struct Cluster {
    pub inventory: Arc<Inventory>,
    pub state: State,
    /// Where `up` records the allocation, before changing anything.
    pub state_path: PathBuf,
    /// Who runs this (for the cluster lock's message to another run).
    pub owner: String,
    /// This run's id (the cluster lock's).
    pub run_id: String,
}

/// How a run reaches hosts and reports: the real transports and terminal,
/// or fakes in tests.
pub struct Io {
    pub connector: Arc<dyn Connector>,
    pub reporter: Arc<Reporter>,
    pub interrupt: Interrupt,
    pub record: Option<Arc<RunRecord>>,
}

/// What a run did.
pub struct Ran {
    /// The selected hosts, in input order, then hosts outside `--limit`
    /// that had something to say.
    pub reports: Vec<HostReport>,
    /// The allocation the nodes' records gave (none if it could not be made).
    pub allocation: Option<Arc<Allocation>>,
    /// The changes were refused because another run holds the cluster lock.
    pub locked: Option<Locked>,
    /// This run took the cluster lock and lost it before it ended: why.
    pub lost: Option<String>,
    /// kwinctl could not do its own work (the state file): why.
    pub internal: Option<String>,
    /// The removed hosts `reset` reached, which the state file no longer
    /// reserves a block for.
    pub forgotten: Vec<String>,
    /// `reset` reached every host with a block: the state file is removed,
    /// and so are the lock host's registry, generation and lock.
    pub cluster_reset: bool,
    /// What the run's joins leave the operator to know (a bootstrap token
    /// that could not be deleted, with the command that deletes it).
    pub joined: Vec<String>,
}

/// What every host task shares.
struct Ctx {
    mode: Mode,
    opts: RunOptions,
    cluster: Cluster,
    connector: Arc<dyn Connector>,
    renderer: Renderer,
    reporter: Arc<Reporter>,
    interrupt: Interrupt,
    record: Option<Arc<RunRecord>>,
    sem: Arc<Semaphore>,
    barrier: coordinate::Barrier,
    /// The inventory's hosts by address, for reachability: (name, address).
    everyone: Vec<crate::verify::Pinged>,
    /// How many selected hosts have failed so far (for `--max-fail`).
    failures: AtomicUsize,
    /// Kubelet upgrades at once (`upgrade.rs`): one, unless `--parallel`
    /// was given.
    upgrades: Arc<Semaphore>,
    /// How many of them failed (without `--max-fail` the first stops the
    /// rest).
    upgrades_failed: AtomicUsize,
    /// `reset`: the blocks of the removed hosts it reaches, to which every
    /// other node drops its routes in the same run.
    removing: Vec<ipnet::Ipv4Net>,
    /// `up` joining Windows nodes with their own identity (src/join/).
    join: Option<crate::join::Joiner>,
}

impl Ctx {
    /// A node's kubelet upgrade failed.
    fn upgrade_failed(&self) {
        self.upgrades_failed.fetch_add(1, Ordering::SeqCst);
    }
    /// A selected host failed.
    fn failed(&self) {
        self.failures.fetch_add(1, Ordering::SeqCst);
    }
    /// `--max-fail` is reached: (hosts failed, the limit). No host starts
    /// changing anything after that.
    fn max_fail_reached(&self) -> Option<(usize, usize)> {
        let max = self.opts.max_fail?;
        let failed = self.failures.load(Ordering::SeqCst);
        (failed >= max).then_some((failed, max))
    }
}

/// Slots to connect, handed out in input order, `--parallel` at a time
/// (`--parallel 1` probes the hosts one by one in inventory order; a host
/// that is gone hands its slot to the next).
fn connect_slots(sem: Arc<Semaphore>, n: usize) -> Vec<oneshot::Receiver<OwnedSemaphorePermit>> {
    let (txs, rxs): (Vec<_>, Vec<_>) = (0..n).map(|_| oneshot::channel()).unzip();
    tokio::spawn(async move {
        for tx in txs {
            let Ok(permit) = sem.clone().acquire_owned().await else {
                break;
            };
            let _ = tx.send(permit);
        }
    });
    rxs
}

/// The host the cluster lock and registry live on: the Linux control-plane
/// host with the lowest address (so that every operator's inventory, in
/// whatever order, picks the same one).
fn lock_host(targets: &[Target]) -> Option<usize> {
    targets
        .iter()
        .enumerate()
        .filter(|(_, t)| t.host.keeps_lock() && !t.removed)
        .min_by_key(|(_, t)| t.host.address)
        .map(|(i, _)| i)
}

/// Run `mode` on every target (see the module's documentation).
pub async fn run_all(
    mode: Mode,
    cluster: Cluster,
    targets: Vec<Target>,
    opts: RunOptions,
    io: Io,
) -> Ran {
    let removing = removing(mode, &cluster, &targets);
    let (ctx, coordinator) = context(mode, cluster, opts, io, targets.len(), removing);
    let lock_at = lock_host(&targets);
    // the lock host's task hands its side channel to the lease, once
    let (handover, handed) = oneshot::channel();
    let seats = targets
        .iter()
        .map(|t| coordinate::Seat {
            name: t.host.name.clone(),
            removed: t.removed,
            selected: t.selected,
        })
        .collect();
    let lease_at = lock_at.map(|i| (i, handed));
    let coordination = tokio::spawn(coordinator.run(ctx.clone(), lease_at, seats));
    let targets: Vec<Arc<Target>> = targets.into_iter().map(Arc::new).collect();
    let tasks = spawn_hosts(&ctx, &targets, lock_at, handover);
    let out = gather(&ctx, &targets, tasks).await;
    let outcome = coordination.await.unwrap_or_else(|e| coordinate::Outcome {
        allocation: None,
        locked: None,
        internal: Some(format!("internal error (please report it): {e}")),
        lease: None,
    });
    let reached = ledger::Reached::of(ctx.mode, targets.iter().map(|t| t.as_ref()), &out);
    // The cluster lock is released, leaving the registry without the
    // hosts that `reset` reached (none left: the lock host's cluster files
    // go).
    let registry = ledger::registry(outcome.allocation.as_deref(), &reached);
    if let Some(lease) = outcome.lease {
        lease.release(&ctx, registry.clone()).await;
    }
    let cl = &ctx.cluster;
    let mut internal = outcome.internal;
    let forgotten = if outcome.allocation.is_some() {
        ledger::forget(ctx.mode, &cl.state, &cl.state_path, &reached, &registry).unwrap_or_else(
            |e| {
                internal.get_or_insert(e);
                ledger::Forgotten::default()
            },
        )
    } else {
        ledger::Forgotten::default()
    };
    let joined = joining::end(&ctx).await;
    Ran {
        joined,
        reports: in_order(&targets, out),
        allocation: outcome.allocation,
        locked: outcome.locked,
        lost: ctx.barrier.fence.lost(),
        internal,
        forgotten: forgotten.removed,
        cluster_reset: forgotten.cluster,
    }
}

/// What every host task shares, and the cluster step that waits for them.
fn context(
    mode: Mode,
    cluster: Cluster,
    opts: RunOptions,
    io: Io,
    n: usize,
    removing: Vec<ipnet::Ipv4Net>,
) -> (Arc<Ctx>, coordinate::Coordinator) {
    let everyone = cluster
        .inventory
        .hosts
        .iter()
        .map(|h| crate::verify::Pinged {
            name: h.name.clone(),
            address: h.address,
        })
        .collect();
    let (barrier, coordinator) = coordinate::Barrier::new(n);
    let join = joining::joiner(mode, &cluster, &opts);
    let ctx = Arc::new(Ctx {
        mode,
        sem: Arc::new(Semaphore::new(opts.parallel.max(1))),
        upgrades: Arc::new(Semaphore::new(opts.upgrade_parallel.max(1))),
        upgrades_failed: AtomicUsize::new(0),
        opts,
        cluster,
        connector: io.connector,
        renderer: crate::os::renderer(),
        reporter: io.reporter,
        interrupt: io.interrupt,
        record: io.record,
        barrier,
        everyone,
        failures: AtomicUsize::new(0),
        removing,
        join,
    });
    (ctx, coordinator)
}

/// `reset`: the blocks the selected removed hosts hold, as the state file
/// has them (none for other commands).
fn removing(mode: Mode, cluster: &Cluster, targets: &[Target]) -> Vec<ipnet::Ipv4Net> {
    if !mode.resets() {
        return Vec::new();
    }
    let gone = cluster
        .state
        .removed_from(|k| cluster.inventory.host(k).is_some());
    targets
        .iter()
        .filter(|t| t.removed && t.selected)
        .filter_map(|t| gone.get(&t.host.name.to_ascii_lowercase()))
        .map(|r| r.pod_cidr)
        .collect()
}

/// Every host's task, in input order; the lock host's gets the lease's
/// handover.
fn spawn_hosts(
    ctx: &Arc<Ctx>,
    targets: &[Arc<Target>],
    lock_at: Option<usize>,
    handover: oneshot::Sender<lease::Handover>,
) -> Vec<tokio::task::JoinHandle<Option<HostReport>>> {
    let mut handover = Some(handover);
    let slots = connect_slots(ctx.sem.clone(), targets.len());
    let mut tasks = Vec::new();
    for ((i, t), slot) in targets.iter().enumerate().zip(slots) {
        let ctx = ctx.clone();
        let t = t.clone();
        let lease = if lock_at == Some(i) {
            handover.take()
        } else {
            None
        };
        tasks.push(tokio::spawn(async move {
            let start = Instant::now();
            let report = host::run(&ctx, &t, i, lease, slot).await;
            report.map(|mut r| {
                r.seconds = start.elapsed().as_secs_f64();
                r
            })
        }));
    }
    tasks
}

/// The hosts' reports as they end, each announced once the checks across
/// hosts it depends on are done (a host's event never says ok while the
/// summary says failed).
async fn gather(
    ctx: &Ctx,
    targets: &[Arc<Target>],
    tasks: Vec<tokio::task::JoinHandle<Option<HostReport>>>,
) -> Vec<Option<HostReport>> {
    let control_planes = targets
        .iter()
        .enumerate()
        .filter(|(_, t)| t.selected && t.host.role == Role::ControlPlane)
        .map(|(i, _)| i);
    let build_label = crate::os::build_label_required(&ctx.cluster.inventory);
    let version = settle::declared_release(ctx);
    let mut kube = cluster::Readiness::new(ctx.mode, control_planes, build_label, version);
    let mut running: FuturesUnordered<_> = tasks
        .into_iter()
        .enumerate()
        .map(|(i, task)| async move { (i, task.await) })
        .collect();
    let mut out: Vec<Option<HostReport>> = targets.iter().map(|_| None).collect();
    let mut announce_all = |ready: Vec<(usize, HostReport)>| {
        for (i, r) in ready {
            announce(ctx, &r, targets[i].selected);
            out[i] = Some(r);
        }
    };
    while let Some((i, done)) = running.next().await {
        // A bug in one host's task fails that host, not the whole run.
        let report = match done {
            Ok(r) => r,
            Err(e) => Some(
                targets[i]
                    .blank(None, &ctx.cluster.inventory)
                    .failed(HostError::Internal(e.to_string())),
            ),
        };
        if let Some(report) = report {
            announce_all(kube.arrived(i, report));
        }
    }
    announce_all(kube.finish());
    out
}

/// The selected hosts' reports in input order, then those of hosts outside
/// `--limit` that had something to say.
fn in_order(targets: &[Arc<Target>], out: Vec<Option<HostReport>>) -> Vec<HostReport> {
    let mut reports: Vec<HostReport> = Vec::new();
    let mut peers: Vec<HostReport> = Vec::new();
    for (t, r) in targets.iter().zip(out) {
        match (t.selected, r) {
            (true, Some(r)) => reports.push(r),
            (false, Some(r)) => peers.push(r),
            (_, None) => {}
        }
    }
    reports.extend(peers);
    reports
}

/// A host's result, on the terminal, in the JSON events and in the run
/// record's list of what is left to do.
fn announce(ctx: &Ctx, r: &HostReport, selected: bool) {
    ctx.reporter.host_done(r, selected);
    if selected && let Some(record) = &ctx.record {
        record.host_done(r);
    }
}
