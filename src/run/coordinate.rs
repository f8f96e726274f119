//! The cluster step between probing and changing: every host's task
//! reports what its node records (or that it could not ask), the pod CIDRs
//! are allocated from those records, `up` records the allocation, and — if
//! any host has something to change — the cluster lock is taken on the lock
//! host before any host changes anything.
//!
//! The cluster lock (`/etc/kwinctl/cluster.lock` on the lock host) keeps two
//! operators, on two machines or two inventories, from changing the cluster
//! at once. It is taken only when something is to change (a converged
//! cluster is still one call per host), and only if no run changed the
//! cluster since this one probed it (a generation counter beside the lock,
//! read by the probe, counted up at each release): a run whose view is
//! stale stops instead of acting on it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use tokio::sync::{OwnedSemaphorePermit, mpsc, oneshot, watch};

use super::Ctx;
pub(super) use super::decide::Decision;
use super::lease::{Channel, Handover, Lease, LockRefused};
use crate::alloc::{Allocation, NodeRecord};
use crate::outcome::HostError;
use crate::upgrade::skew::ControlView;

/// What a host's first phase gave.
pub(super) enum Arrival {
    /// What the node records, and the cluster lock's generation on it;
    /// on the control plane, what its kubectl said.
    Probed(NodeRecord, u64, Option<ControlView>),
    /// The host could not be asked.
    Failed,
    /// The host could not be asked because its host key is not known yet:
    /// `up --accept-new-host-keys` would reach it (`plan` plans it as a
    /// new node).
    Unverified,
}

/// Whether hosts may change.
#[derive(Clone)]
pub(super) enum Go {
    Yes,
    /// No: why.
    No(HostError),
}

/// Another run holds the cluster lock, or changed the cluster meanwhile.
#[derive(Debug, Clone)]
pub struct Locked(pub String);

pub(super) struct Outcome {
    pub allocation: Option<Arc<Allocation>>,
    pub locked: Option<Locked>,
    pub internal: Option<String>,
    /// The cluster lock's lease, to release at the end (`None`: the
    /// inventory has no lock host).
    pub lease: Option<Lease>,
}

pub(super) struct Barrier {
    arrive: mpsc::UnboundedSender<(usize, Arrival)>,
    decision: watch::Receiver<Option<Arc<Decision>>>,
    ready: mpsc::UnboundedSender<(usize, bool)>,
    go: watch::Receiver<Option<Go>>,
    /// The cluster lock's lease as the hosts see it: a host starts
    /// changing only while it holds (see [`super::lease::Fence`]).
    pub(super) fence: super::lease::Fence,
    /// Each host's turn for the second phase (taken by its ticket).
    turns: std::sync::Mutex<Vec<Option<oneshot::Receiver<OwnedSemaphorePermit>>>>,
    /// The hosts (lower-case names) that change something in this run, and
    /// those of them still changing: a host's reachability check of one of
    /// them (a Windows node whose firewall opens in this run) is taken again
    /// once it is done.
    changing: std::sync::Mutex<BTreeSet<String>>,
    pending: watch::Sender<BTreeSet<String>>,
    /// The hosts (lower-case names) that failed in this run: a peer's
    /// failed ping to one of them is that host's failure, not the peer's.
    failed: std::sync::Mutex<BTreeSet<String>>,
}

pub(super) struct Coordinator {
    n: usize,
    arrive: mpsc::UnboundedReceiver<(usize, Arrival)>,
    decision: watch::Sender<Option<Arc<Decision>>>,
    ready: mpsc::UnboundedReceiver<(usize, bool)>,
    go: watch::Sender<Option<Go>>,
    turns: Vec<oneshot::Sender<OwnedSemaphorePermit>>,
}

impl Barrier {
    pub(super) fn new(n: usize) -> (Barrier, Coordinator) {
        let (arrive_tx, arrive_rx) = mpsc::unbounded_channel();
        let (ready_tx, ready_rx) = mpsc::unbounded_channel();
        let (decision_tx, decision_rx) = watch::channel(None);
        let (go_tx, go_rx) = watch::channel(None);
        let (turn_tx, turn_rx): (Vec<_>, Vec<_>) = (0..n).map(|_| oneshot::channel()).unzip();
        (
            Barrier {
                arrive: arrive_tx,
                decision: decision_rx,
                ready: ready_tx,
                go: go_rx,
                fence: super::lease::Fence::default(),
                turns: std::sync::Mutex::new(turn_rx.into_iter().map(Some).collect()),
                changing: std::sync::Mutex::new(BTreeSet::new()),
                pending: watch::channel(BTreeSet::new()).0,
                failed: std::sync::Mutex::new(BTreeSet::new()),
            },
            Coordinator {
                n,
                arrive: arrive_rx,
                decision: decision_tx,
                ready: ready_rx,
                go: go_tx,
                turns: turn_tx,
            },
        )
    }
}

/// A host task's place at the barrier: whatever it does not say by itself
/// (it failed, or panicked) is said when it is dropped, so no task and no
/// coordinator ever waits for a host that is gone.
pub(super) struct Ticket<'a> {
    barrier: &'a Barrier,
    i: usize,
    name: String,
    arrived: Option<bool>,
    readied: bool,
    /// Not asked because its host key is not known yet.
    unverified: bool,
    /// This host's turn in the second phase (dropped with the ticket, so a
    /// host that is gone never holds a turn).
    turn: Option<oneshot::Receiver<OwnedSemaphorePermit>>,
}

impl<'a> Ticket<'a> {
    pub(super) fn new(barrier: &'a Barrier, i: usize, name: &str) -> Ticket<'a> {
        let turn = barrier.turns.lock().unwrap()[i].take();
        Ticket {
            barrier,
            i,
            name: name.to_ascii_lowercase(),
            arrived: None,
            readied: false,
            unverified: false,
            turn,
        }
    }

    /// Wait for this host's turn to change things: hosts take turns in
    /// input order, `--parallel` at a time (`--parallel 1` is a rolling run
    /// in inventory order).
    pub(super) async fn turn(&mut self) -> Option<OwnedSemaphorePermit> {
        self.turn.take()?.await.ok()
    }

    /// This host could not be asked because its host key is not known
    /// yet (said before the ticket is dropped).
    pub(super) fn unverified(&mut self) {
        self.unverified = true;
    }

    /// This host failed in this run (said before [`Ticket::done`], so a
    /// peer waiting for it knows).
    pub(super) fn failed(&self) {
        self.barrier
            .failed
            .lock()
            .unwrap()
            .insert(self.name.clone());
    }

    /// The hosts that failed in this run so far.
    pub(super) fn failed_hosts(&self) -> BTreeSet<String> {
        self.barrier.failed.lock().unwrap().clone()
    }

    /// Why this run may no longer change hosts: it lost the cluster lock.
    pub(super) fn lock_lost(&self) -> Option<String> {
        self.barrier.fence.lost()
    }

    /// This host has done its changes (or will make none).
    pub(super) fn done(&self) {
        self.barrier
            .pending
            .send_if_modified(|p| p.remove(&self.name));
    }

    /// The hosts (lower-case names) that change something in this run.
    pub(super) fn changing(&self) -> BTreeSet<String> {
        self.barrier.changing.lock().unwrap().clone()
    }

    /// Wait until none of `hosts` is still changing (bounded: each host's
    /// own steps are, and a host that is gone is done).
    pub(super) async fn wait_done(&self, hosts: &BTreeSet<String>) {
        let mut rx = self.barrier.pending.subscribe();
        let _ = tokio::time::timeout(
            std::time::Duration::from_secs(3600),
            rx.wait_for(|p| p.is_disjoint(hosts)),
        )
        .await;
    }

    /// Report the first phase and wait for the allocation.
    pub(super) async fn arrive(&mut self, a: Arrival) -> Arc<Decision> {
        self.arrived = Some(matches!(a, Arrival::Probed(..)));
        let _ = self.barrier.arrive.send((self.i, a));
        let mut rx = self.barrier.decision.clone();
        let d = rx
            .wait_for(|d| d.is_some())
            .await
            .map(|d| d.clone().expect("decision"));
        d.unwrap_or_else(|_| {
            Arc::new(Decision {
                allocation: Err("internal error (please report it): the cluster step ended".into()),
                nodes: BTreeMap::new(),
                mesh: BTreeMap::new(),
            })
        })
    }

    /// Say whether this host has changes to make, and wait to be let go.
    pub(super) async fn ready(&mut self, changes: bool) -> Go {
        self.readied = true;
        let _ = self.barrier.ready.send((self.i, changes));
        let mut rx = self.barrier.go.clone();
        match rx.wait_for(|g| g.is_some()).await {
            Ok(g) => g.clone().expect("go"),
            Err(_) => Go::No(HostError::Internal("the cluster step ended".into())),
        }
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        self.done();
        match self.arrived {
            None => {
                let a = if self.unverified {
                    Arrival::Unverified
                } else {
                    Arrival::Failed
                };
                let _ = self.barrier.arrive.send((self.i, a));
            }
            Some(true) if !self.readied => {
                let _ = self.barrier.ready.send((self.i, false));
            }
            _ => {}
        }
    }
}

/// A host of the run, as the cluster step sees it.
pub(super) struct Seat {
    pub name: String,
    /// Removed from the inventory (reached by `reset` by name): its record
    /// decides nothing.
    pub removed: bool,
    /// Selected by `--limit`: its failure counts for `--max-fail`.
    pub selected: bool,
}

/// What the hosts' first phase gave the cluster step.
struct Arrived {
    /// What each node records, by lower-case name.
    records: BTreeMap<String, NodeRecord>,
    /// How many hosts were probed (and will say whether they change).
    probed: usize,
    /// The cluster lock's generation on the lock host, when it answered.
    generation: Option<u64>,
    /// What the control plane's kubectl said, when it was asked.
    control: Option<ControlView>,
    /// Hosts of the inventory (lower-case names) not asked because their
    /// host key is not known yet.
    unverified: Vec<String>,
}

/// Whether the hosts may change, and the lease if the lock was taken.
struct Verdict {
    go: Go,
    locked: Option<Locked>,
    taken: bool,
}

impl Coordinator {
    /// `lock_at`: the lock host, and where its task hands over its channel.
    pub(super) async fn run(
        mut self,
        ctx: Arc<Ctx>,
        lock_at: Option<(usize, oneshot::Receiver<Handover>)>,
        seats: Vec<Seat>,
    ) -> Outcome {
        let lock_host = lock_at.as_ref().map(|(i, _)| *i);
        let arrived = self.arrivals(&ctx, lock_host, &seats).await;
        let lock_record = lock_host.and_then(|i| {
            arrived
                .records
                .get(&seats[i].name.to_ascii_lowercase())
                .cloned()
        });
        let (decision, internal) =
            super::decide::decide(&ctx, arrived.records, &arrived.unverified);
        let allocation = decision.allocation.as_ref().ok().cloned();
        let _ = self.decision.send(Some(Arc::new(decision)));
        let changing = self.readiness(arrived.probed, &seats).await;
        let mut channel = match lock_at {
            Some((i, handover)) => Some(Channel::receive(&seats[i].name, handover).await),
            None => None,
        };
        let verdict = if let Some(e) = &internal {
            Verdict::no(HostError::Local(e.clone()))
        } else if (changing.is_empty()
            && !leftover(&ctx, allocation.as_deref(), lock_record.as_ref(), &seats))
            || ctx.interrupt.is_set()
        {
            Verdict::yes(false)
        } else if let Some(why) = super::skew::refused(&ctx, arrived.control.as_ref(), &changing) {
            Verdict::no(HostError::Refused(why))
        } else {
            let registry =
                super::ledger::registry(allocation.as_deref(), &super::ledger::Reached::default());
            Verdict::of(match channel.as_mut() {
                Some(c) => c.lock(&ctx, arrived.generation, &registry).await,
                None => Err(LockRefused::no_lock_host()),
            })
        };
        let lease = match channel {
            Some(c) if verdict.taken => Some(c.keep(&ctx)),
            Some(c) => Some(c.set_aside().await),
            None => None,
        };
        if matches!(verdict.go, Go::Yes) {
            *ctx.barrier.changing.lock().unwrap() = changing.clone();
            ctx.barrier.pending.send_replace(changing);
        }
        let _ = self.go.send(Some(verdict.go));
        // Turns for the second phase, in input order: a host that has gone
        // (its turn dropped) hands its permit straight to the next.
        for tx in self.turns {
            let Ok(permit) = ctx.sem.clone().acquire_owned().await else {
                break;
            };
            let _ = tx.send(permit);
        }
        Outcome {
            allocation,
            locked: verdict.locked,
            internal,
            lease,
        }
    }

    /// Every host's first phase: what its node records, or that it failed.
    async fn arrivals(&mut self, ctx: &Ctx, lock_host: Option<usize>, seats: &[Seat]) -> Arrived {
        let mut arrived = Arrived {
            records: BTreeMap::new(),
            probed: 0,
            generation: None,
            control: None,
            unverified: Vec::new(),
        };
        for _ in 0..self.n {
            let Some((i, a)) = self.arrive.recv().await else {
                break;
            };
            let seat = &seats[i];
            match a {
                Arrival::Failed | Arrival::Unverified => {
                    // counts for --max-fail before any host changes
                    if seat.selected && !ctx.interrupt.is_set() {
                        ctx.failed();
                    }
                    let name = seat.name.to_ascii_lowercase();
                    if matches!(a, Arrival::Unverified) && !seat.removed {
                        arrived.unverified.push(name.clone());
                    }
                    ctx.barrier.failed.lock().unwrap().insert(name);
                }
                Arrival::Probed(rec, generation, control) => {
                    arrived.probed += 1;
                    arrived.control = arrived.control.take().or(control);
                    if lock_host == Some(i) {
                        arrived.generation = Some(generation);
                    }
                    if !seat.removed {
                        arrived.records.insert(seat.name.to_ascii_lowercase(), rec);
                    }
                }
            }
        }
        arrived
    }

    /// Every probed host says whether it has changes: those that do (lower
    /// case names).
    async fn readiness(&mut self, probed: usize, seats: &[Seat]) -> BTreeSet<String> {
        let mut changing = BTreeSet::new();
        for _ in 0..probed {
            match self.ready.recv().await {
                Some((i, true)) => {
                    changing.insert(seats[i].name.to_ascii_lowercase());
                }
                Some((_, false)) => {}
                None => break,
            }
        }
        changing
    }
}

/// `reset`: the lock host keeps cluster files this reset must change even
/// when no node has anything to remove (see [`super::ledger::leftover`]).
fn leftover(
    ctx: &Ctx,
    allocation: Option<&Allocation>,
    lock_record: Option<&NodeRecord>,
    seats: &[Seat],
) -> bool {
    let resets = super::ledger::Reached::planned(
        seats.iter().filter(|s| s.selected).map(|s| s.name.clone()),
    );
    super::ledger::leftover(ctx.mode, allocation, &resets, lock_record)
}

impl Verdict {
    fn yes(taken: bool) -> Verdict {
        Verdict {
            go: Go::Yes,
            locked: None,
            taken,
        }
    }
    fn no(e: HostError) -> Verdict {
        Verdict {
            go: Go::No(e),
            locked: None,
            taken: false,
        }
    }
    /// What taking the cluster lock gave.
    fn of(lock: Result<(), LockRefused>) -> Verdict {
        match lock {
            Ok(()) => Verdict::yes(true),
            Err(r) => Verdict {
                locked: r.held.then(|| Locked(r.why.clone())),
                ..Verdict::no(HostError::Refused(r.why))
            },
        }
    }
}
