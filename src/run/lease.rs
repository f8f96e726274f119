//! The cluster lock's lease (see docs/locks.md): taken when a run has
//! something to change, renewed in the background while the run works,
//! released at the end; a lock whose lease ran out is broken by the next
//! run that needs it.
//!
//! All of it goes over one channel to the lock host: a side channel of its
//! connection, which the lock host's task hands over once, right after it
//! connects ([`Handover`]). The task keeps its own session for its own
//! calls (the lock host converges like any other); this module is the only
//! user of the channel, and sends the lock host's trace out when it is done
//! with it.
//!
//! The lease is fenced ([`Fence`]): before a host starts changing, the lock
//! host confirms the lock is still this run's, in a renewal sent after the
//! host asked; when the lock host does not answer, the host starts only
//! while the last confirmed renewal, by this machine's monotonic clock, is
//! younger than the lease less a margin. A run frozen or stalled past its
//! lease, or whose lock was broken, starts no host after that, and ends
//! with an error.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Notify, oneshot, watch};
use tokio::time::Instant;

use super::{Ctx, step};
use crate::text::clip;
use crate::transport::{Session, Trace};
use crate::wire::{What, read_lock};

/// What the lock host's task hands the lease, once, right after it
/// connects.
pub(super) struct Handover {
    /// A side channel of the lock host's connection (`None`: its transport
    /// has none; the lease then opens a connection of its own).
    pub side: Option<Box<dyn Session>>,
    /// The lock host's trace (its steps and the lease's): it goes out when
    /// the lease is done with the channel.
    pub trace: Trace,
}

/// Why the cluster lock was not taken.
#[derive(Debug, Clone)]
pub(super) struct LockRefused {
    pub why: String,
    /// Another run is the reason: it holds the lock, or changed the cluster
    /// since this run probed it.
    pub held: bool,
}

impl LockRefused {
    fn other(why: String) -> LockRefused {
        LockRefused { why, held: false }
    }
    /// The inventory names no host to keep the lock on.
    pub(super) fn no_lock_host() -> LockRefused {
        LockRefused::other(
            "no Linux control-plane host in the inventory to keep the cluster lock and registry on: \
             mark the control plane `role: control-plane` (two operators must not change the cluster \
             at once, and each must see the blocks the other handed out)"
                .into(),
        )
    }
}

/// The lock host's channel while the lease has it.
pub(super) struct Channel {
    host: String,
    session: Option<Box<dyn Session>>,
    /// `None`: the lock host's task never connected (it sent out its own).
    trace: Option<Trace>,
}

impl Channel {
    /// What the lock host's task handed over (nothing, when it did not
    /// connect).
    pub(super) async fn receive(host: &str, handover: oneshot::Receiver<Handover>) -> Channel {
        let h = handover.await.ok();
        Channel {
            host: host.to_string(),
            trace: h.as_ref().map(|h| h.trace.clone()),
            session: h.and_then(|h| h.side),
        }
    }

    /// The channel, opened anew when there is none (a transport without
    /// side channels, or one lost).
    async fn open(&mut self, ctx: &Ctx) -> Result<&mut Box<dyn Session>, String> {
        if self.session.is_none() {
            let h = ctx
                .cluster
                .inventory
                .host(&self.host)
                .ok_or("not in the inventory")?;
            let trace = Trace::new();
            let s = step::connect(ctx, h, crate::os::interpreter(h.os), &trace)
                .await
                .map_err(|e| e.to_string())?;
            self.session = Some(s);
        }
        Ok(self.session.as_mut().expect("a session"))
    }

    /// Take the cluster lock, unless another run changed the cluster since
    /// `generation` (what this run's probe of the lock host read; `None`:
    /// the lock host did not answer).
    pub(super) async fn lock(
        &mut self,
        ctx: &Ctx,
        generation: Option<u64>,
        registry: &[String],
    ) -> Result<(), LockRefused> {
        let host = self.host.clone();
        let (Some(generation), Some(_)) = (generation, &self.trace) else {
            return Err(LockRefused::other(format!(
                "the cluster lock lives on {host}, which did not answer: rerun when it does \
                 (two operators must not change the cluster at once)"
            )));
        };
        let script = crate::os::lock_script(
            &ctx.renderer,
            &ctx.cluster.run_id,
            &ctx.cluster.owner,
            generation,
            registry,
        );
        let cannot =
            |e: String| LockRefused::other(format!("cannot take the cluster lock on {host}: {e}"));
        let s = self.open(ctx).await.map_err(cannot)?;
        let sent = Instant::now();
        let out = step::call(ctx, s, &host, "cluster lock", script)
            .await
            .map_err(|e| cannot(e.to_string()))?;
        let answer = read_lock(&out.stdout);
        if let Some(b) = &answer.broken {
            ctx.reporter.say(&format!(
                "note: the cluster lock on {host} was broken: its lease ran out {}s ago (by {host}'s \
                 clock), so its run is gone or lost {host}; it was {}, taken {}s ago",
                clip(&b.expired, 12),
                clip(&b.owner, 300),
                clip(&b.age, 12),
            ));
        }
        refused(ctx, &host, generation, answer.what, &out)?;
        ctx.barrier.fence.taken(sent);
        Ok(())
    }

    /// Keep the lease this channel took: renewed in the background until
    /// [`Lease::release`].
    pub(super) fn keep(self, ctx: &Arc<Ctx>) -> Lease {
        let (tx, rx) = oneshot::channel();
        let task = tokio::spawn(keep(ctx.clone(), self, rx));
        Lease::Kept { release: tx, task }
    }

    /// No lock is taken on this channel: it closes now, and the lock host's
    /// trace goes out at the end.
    pub(super) async fn set_aside(mut self) -> Lease {
        if let Some(s) = self.session.take() {
            s.close().await;
        }
        Lease::Unused {
            host: self.host,
            trace: self.trace,
        }
    }

    async fn close(mut self, ctx: &Ctx) {
        if let Some(s) = self.session.take() {
            s.close().await;
        }
        if let Some(t) = &self.trace {
            step::emit(ctx, &self.host, "ssh", t);
        }
    }
}

/// The lock answer's meaning: taken, or refused with why.
fn refused(
    ctx: &Ctx,
    host: &str,
    generation: u64,
    what: What,
    out: &crate::transport::Output,
) -> Result<(), LockRefused> {
    let held = |why| Err(LockRefused { why, held: true });
    match what {
        What::Taken => Ok(()),
        What::Changed(now) => held(format!(
            "another kwinctl run took or released the cluster lock on {host} since this one \
             probed the cluster (its generation is {}, {generation} when probed): run again",
            clip(&now, 20)
        )),
        What::Held(h) => held(format!(
            "the cluster lock on {host} is held by another run: {}, taken {}s ago; wait for it \
             to finish. If that run is gone, the lock clears when its lease runs out (in {}s, \
             by {host}'s clock) or at once with `kwinctl unlock -i {}`",
            clip(&h.owner, 300),
            clip(&h.age, 12),
            clip(&h.left, 12),
            ctx.cluster.inventory.path.display(),
        )),
        What::Failed(why) => Err(LockRefused::other(format!(
            "cannot take the cluster lock on {host}: {}; nothing was changed. Free space in \
             /etc/kwinctl on {host}, or make it writable, and run again",
            clip(&why, 300)
        ))),
        What::Nothing | What::Free | What::Broke | What::Renewed | What::Released | What::Lost => {
            Err(LockRefused::other(format!(
                "cannot take the cluster lock on {host}: the lock script said nothing (exit {:?}): {}",
                out.exit,
                clip(&crate::text::printable(out.stderr.trim()), 300)
            )))
        }
    }
}

/// The lease at the end of the run.
pub(super) enum Lease {
    /// Taken and being renewed: released by the renewing task.
    Kept {
        release: oneshot::Sender<Vec<String>>,
        task: tokio::task::JoinHandle<()>,
    },
    /// Never taken: only the lock host's trace is left to send out.
    Unused { host: String, trace: Option<Trace> },
}

impl Lease {
    /// Release the cluster lock (when this run took it), leaving `registry`
    /// on the lock host, and close the channel.
    pub(super) async fn release(self, ctx: &Ctx, registry: Vec<String>) {
        match self {
            Lease::Kept { release, task } => {
                let _ = release.send(registry);
                let _ = task.await;
            }
            Lease::Unused { host, trace } => {
                if let Some(t) = trace {
                    step::emit(ctx, &host, "ssh", &t);
                }
            }
        }
    }
}

/// The lease as the hosts see it: whether it was taken, when the lock host
/// last confirmed it, and whether it was lost. Hosts ask it before they
/// start changing ([`Fence::check`]); the renewing task answers.
pub(super) struct Fence {
    state: std::sync::Mutex<Kept>,
    /// A host asks for a renewal now.
    ask: Notify,
    /// Renewals done: when each was sent, and whether the lock host
    /// confirmed it.
    rounds: watch::Sender<Option<Round>>,
}

#[derive(Default)]
struct Kept {
    /// When the last renewal (or the take) the lock host confirmed was sent,
    /// by this machine's monotonic clock; `None`: no lock was taken.
    confirmed: Option<Instant>,
    /// Why this run lost the lock.
    lost: Option<String>,
    /// When a host last asked for a renewal.
    asked: Option<Instant>,
}

#[derive(Clone, Copy)]
struct Round {
    sent: Instant,
    /// `None`: the lock host did not answer.
    renewed: Option<bool>,
}

impl Default for Fence {
    fn default() -> Fence {
        Fence {
            state: std::sync::Mutex::new(Kept::default()),
            ask: Notify::new(),
            rounds: watch::channel(None).0,
        }
    }
}

/// How much sooner than the lock host this run gives up its lease: its
/// clock and the lock host's may run at slightly different rates, and a
/// host's first call reaches its host a moment after the check.
fn margin(lease: Duration) -> Duration {
    (lease / 10).max(Duration::from_secs(1)).min(lease / 2)
}

impl Fence {
    /// The lock was taken by a call sent at `sent`.
    fn taken(&self, sent: Instant) {
        self.state.lock().unwrap().confirmed = Some(sent);
    }

    /// Why this run lost the lock, if it did.
    pub(super) fn lost(&self) -> Option<String> {
        self.state.lock().unwrap().lost.clone()
    }

    /// This run lost the lock on `host` (said once).
    fn lose(&self, ctx: &Ctx, host: &str, why: &str) {
        let mut st = self.state.lock().unwrap();
        if st.lost.is_none() {
            ctx.reporter.say(&format!(
                "warning: this run lost the cluster lock on {host}: {why}; no further host starts changing"
            ));
            st.lost = Some(format!("this run lost the cluster lock on {host}: {why}"));
        }
    }

    /// Whether a host may start changing now: `Err(why)` once the lock is
    /// lost. The lock host confirms the lock in a renewal sent after this
    /// call began; when it does not answer, the last confirmed renewal must
    /// be younger than the lease less a margin. A run without a lock (it
    /// has nothing to change) is let through.
    pub(super) async fn check(&self, ctx: &Ctx) -> Result<(), String> {
        if let Some(why) = self.lost() {
            return Err(why);
        }
        if self.state.lock().unwrap().confirmed.is_none() {
            return Ok(());
        }
        let asked = Instant::now();
        let mut rounds = self.rounds.subscribe();
        self.state.lock().unwrap().asked = Some(asked);
        self.ask.notify_one();
        // a renewal is bounded by a third of a lease; one more for the one
        // under way when this host asked
        let answered = tokio::time::timeout(
            ctx.opts.lease,
            rounds.wait_for(|r| r.is_some_and(|r| r.sent >= asked)),
        )
        .await
        .ok()
        .and_then(Result::ok)
        .is_some_and(|r| r.is_some_and(|r| r.renewed.is_some()));
        if let Some(why) = self.lost() {
            return Err(why);
        }
        let confirmed = self.state.lock().unwrap().confirmed;
        let bound = ctx.opts.lease - margin(ctx.opts.lease);
        match confirmed {
            Some(at) if answered && at >= asked => Ok(()),
            Some(at) if at.elapsed() < bound => Ok(()),
            _ => {
                let why = format!(
                    "the lock host did not confirm this run's lease for {}s (by this machine's \
                     monotonic clock; was this run stopped or stalled?)",
                    confirmed.map_or(0, |at| at.elapsed().as_secs())
                );
                Err(why)
            }
        }
    }
}

/// Keep this run's lease on the cluster lock while it works: renew it
/// whenever a host is about to start changing (the first right after the
/// lock was taken) and a third of a lease apart, on the channel (a new
/// connection when that one is gone). When the lock is another's, or the
/// lock host has not confirmed it for a whole lease, the run has lost it:
/// no host starts changing after that. Then release it when asked.
async fn keep(ctx: Arc<Ctx>, mut ch: Channel, mut release: oneshot::Receiver<Vec<String>>) {
    let lease = ctx.opts.lease;
    let every = lease / 3;
    let fence = &ctx.barrier.fence;
    let mut last: Option<Instant> = None;
    let registry = loop {
        tokio::select! {
            biased;
            r = &mut release => break r.ok(),
            _ = tokio::time::sleep(every), if fence.lost().is_none() => {}
            _ = fence.ask.notified(), if fence.lost().is_none() => {
                // hosts that asked before the last renewal was sent have
                // their answer: one renewal serves them all
                let asked = fence.state.lock().unwrap().asked;
                if asked.is_some_and(|a| last.is_some_and(|l| a < l)) {
                    continue;
                }
            }
        }
        let sent = Instant::now();
        last = Some(sent);
        let renewed = renew(&ctx, &mut ch, every).await;
        match renewed {
            Some(true) => fence.taken(sent),
            Some(false) => fence.lose(&ctx, &ch.host, "another run or `kwinctl unlock` broke it"),
            None => {
                let kept = fence.state.lock().unwrap().confirmed;
                if kept.is_some_and(|k| k.elapsed() >= lease) {
                    let why = format!(
                        "{} did not confirm its lease for {}s",
                        ch.host,
                        lease.as_secs()
                    );
                    fence.lose(&ctx, &ch.host, &why);
                }
            }
        }
        fence.rounds.send_replace(Some(Round { sent, renewed }));
    };
    if let Some(registry) = registry {
        unlock(&ctx, &mut ch, &registry).await;
    }
    ch.close(&ctx).await;
}

/// One renewal: `Some(true)` renewed, `Some(false)` the lock is not this
/// run's any more, `None` no answer, or the lock host could not write the
/// lease (the channel is dropped: the next renewal opens another).
async fn renew(ctx: &Ctx, ch: &mut Channel, within: Duration) -> Option<bool> {
    let script = crate::os::renew_script(&ctx.renderer, &ctx.cluster.run_id);
    let answer = match tokio::time::timeout(within, ch.open(ctx)).await {
        Ok(Ok(s)) => tokio::time::timeout(within, s.run(&script))
            .await
            .ok()
            .and_then(Result::ok),
        _ => None,
    };
    match answer.map(|o| read_lock(&o.stdout).what) {
        Some(What::Renewed) => Some(true),
        Some(What::Lost) => Some(false),
        _ => {
            if let Some(s) = ch.session.take() {
                s.close().await;
            }
            None
        }
    }
}

/// Give the lock back, leaving `registry` on the lock host. A lock that is
/// no longer this run's when it ends was lost.
async fn unlock(ctx: &Ctx, ch: &mut Channel, registry: &[String]) {
    let script = crate::os::unlock_script(&ctx.renderer, &ctx.cluster.run_id, registry);
    let host = ch.host.clone();
    let out = match ch.open(ctx).await {
        Ok(s) => step::call(ctx, s, &host, "cluster unlock", script)
            .await
            .map_err(|e| e.to_string()),
        Err(e) => Err(e),
    };
    match out.map(|o| read_lock(&o.stdout).what) {
        Ok(What::Released) => {}
        Ok(What::Lost) => ctx.barrier.fence.lose(
            ctx,
            &host,
            "it was no longer this run's when the run ended (its lease ran out, or another run or \
             `kwinctl unlock` broke it)",
        ),
        Ok(What::Failed(why)) => ctx.reporter.say(&format!(
            "warning: cannot release the cluster lock on {host}: {}; it clears by itself within \
             {}s (its lease). Free space in /etc/kwinctl on {host}",
            clip(&why, 300),
            ctx.opts.lease.as_secs()
        )),
        Ok(_) => ctx.reporter.say(&format!(
            "warning: cannot release the cluster lock on {host}: the unlock script said nothing; \
             it clears by itself within {}s (its lease)",
            ctx.opts.lease.as_secs()
        )),
        Err(e) => ctx.reporter.say(&format!(
            "warning: cannot release the cluster lock: {e}; it clears by itself within {}s (its lease)",
            ctx.opts.lease.as_secs()
        )),
    }
}
