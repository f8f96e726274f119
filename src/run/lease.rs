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

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::oneshot;

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
        refused(ctx, &host, generation, answer.what, &out)
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
        What::Nothing | What::Free | What::Broke => Err(LockRefused::other(format!(
            "cannot take the cluster lock on {host}: the lock script said nothing (exit {:?}): {}",
            out.exit,
            clip(&crate::text::printable(out.stderr.trim()), 300)
        ))),
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

/// Keep this run's lease on the cluster lock while it works: renew it a
/// third of a lease apart on the channel (a new connection when that one is
/// gone). When the lock is another's, or the lock host has not answered for
/// a whole lease, the run has lost it: no host starts changing after that.
/// Then release it when asked.
async fn keep(ctx: Arc<Ctx>, mut ch: Channel, mut release: oneshot::Receiver<Vec<String>>) {
    let lease = ctx.opts.lease;
    let every = lease / 3;
    let mut kept = tokio::time::Instant::now();
    let mut lost = false;
    let registry = loop {
        tokio::select! {
            biased;
            r = &mut release => break r.ok(),
            _ = tokio::time::sleep(every), if !lost => {}
        }
        match renew(&ctx, &mut ch, every).await {
            Some(true) => kept = tokio::time::Instant::now(),
            Some(false) => {
                lose(
                    &ctx,
                    &ch.host,
                    "another run or `kwinctl unlock` broke it".into(),
                );
                lost = true;
            }
            None if kept.elapsed() >= lease => {
                let why = format!(
                    "{} did not confirm its lease for {}s",
                    ch.host,
                    lease.as_secs()
                );
                lose(&ctx, &ch.host, why);
                lost = true;
            }
            None => {}
        }
    };
    if let Some(registry) = registry {
        unlock(&ctx, &mut ch, &registry).await;
    }
    ch.close(&ctx).await;
}

/// One renewal: `Some(true)` renewed, `Some(false)` the lock is not this
/// run's any more, `None` no answer (the channel is dropped: the next
/// renewal opens another).
async fn renew(ctx: &Ctx, ch: &mut Channel, within: Duration) -> Option<bool> {
    let script = crate::os::renew_script(&ctx.renderer, &ctx.cluster.run_id);
    let answer = match tokio::time::timeout(within, ch.open(ctx)).await {
        Ok(Ok(s)) => tokio::time::timeout(within, s.run(&script))
            .await
            .ok()
            .and_then(Result::ok),
        _ => None,
    };
    match answer {
        Some(o) if o.stdout.contains("KWL renewed") => Some(true),
        Some(o) if o.stdout.contains("KWL lost") => Some(false),
        _ => {
            if let Some(s) = ch.session.take() {
                s.close().await;
            }
            None
        }
    }
}

fn lose(ctx: &Ctx, host: &str, why: String) {
    ctx.reporter.say(&format!(
        "warning: this run lost the cluster lock on {host}: {why}; no further host starts changing"
    ));
    *ctx.barrier.lock_lost.lock().unwrap() =
        Some(format!("this run lost the cluster lock on {host}: {why}"));
}

/// Give the lock back, leaving `registry` on the lock host.
async fn unlock(ctx: &Ctx, ch: &mut Channel, registry: &[String]) {
    let script = crate::os::unlock_script(&ctx.renderer, &ctx.cluster.run_id, registry);
    let host = ch.host.clone();
    let out = match ch.open(ctx).await {
        Ok(s) => step::call(ctx, s, &host, "cluster unlock", script)
            .await
            .map_err(|e| e.to_string()),
        Err(e) => Err(e),
    };
    match out {
        Ok(o) if o.stdout.contains("KWL released") => {}
        Ok(_) => ctx.reporter.say(
            "warning: the cluster lock was no longer this run's when it ended (its lease ran out, or `kwinctl unlock` broke it)",
        ),
        Err(e) => ctx.reporter.say(&format!(
            "warning: cannot release the cluster lock: {e}; it clears by itself within {}s (its lease)",
            ctx.opts.lease.as_secs()
        )),
    }
}
