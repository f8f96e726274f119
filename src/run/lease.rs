//! The cluster lock's lease (see docs/locks.md): taken on the lock host's
//! connection when a run has something to change, renewed in the
//! background while the run works, released at the end; a lock whose
//! lease ran out is broken by the next run that needs it.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::{Ctx, step};
use crate::text::clip;
use crate::transport::Session;

/// Take the cluster lock on the lock host's connection. Err: why not, and
/// whether another run is the reason (it holds the lock, or changed the
/// cluster since this run probed it).
pub(super) async fn lock(
    ctx: &Ctx,
    lock_at: Option<usize>,
    targets: &[(String, bool, bool)],
    generation: Option<u64>,
    registry: &[String],
) -> Result<(), (String, bool)> {
    let Some(i) = lock_at else {
        return Err((
            "no Linux control-plane host in the inventory to keep the cluster lock and registry on: \
             mark the control plane `role: control-plane` (two operators must not change the cluster \
             at once, and each must see the blocks the other handed out)"
                .into(),
            false,
        ));
    };
    let host = &targets[i].0;
    let mut slot = ctx.barrier.lock_session.lock().await;
    let (Some(s), Some(generation)) = (slot.as_mut(), generation) else {
        return Err((
            format!(
                "the cluster lock lives on {host}, which did not answer: rerun when it does \
                 (two operators must not change the cluster at once)"
            ),
            false,
        ));
    };
    let script = crate::os::lock_script(
        &ctx.renderer,
        &ctx.cluster.run_id,
        &ctx.cluster.owner,
        generation,
        registry,
    );
    let out = step::call(ctx, s, host, "cluster lock", script)
        .await
        .map_err(|e| {
            (
                format!("cannot take the cluster lock on {host}: {e}"),
                false,
            )
        })?;
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
    match answer.what {
        What::Taken => {
            ctx.barrier.lock_taken.store(true, Ordering::SeqCst);
            Ok(())
        }
        What::Changed(now) => Err((
            format!(
                "another kwinctl run took or released the cluster lock on {host} since this one \
                 probed the cluster (its generation is {}, {generation} when probed): run again",
                clip(&now, 20)
            ),
            true,
        )),
        What::Held(h) => Err((
            format!(
                "the cluster lock on {host} is held by another run: {}, taken {}s ago; wait for it \
                 to finish. If that run is gone, the lock clears when its lease runs out (in {}s, \
                 by {host}'s clock) or at once with `kwinctl unlock -i {}`",
                clip(&h.owner, 300),
                clip(&h.age, 12),
                clip(&h.left, 12),
                ctx.cluster.inventory.path.display(),
            ),
            true,
        )),
        What::Nothing | What::Free | What::Broke => Err((
            format!(
                "cannot take the cluster lock on {host}: the lock script said nothing (exit {:?}): {}",
                out.exit,
                clip(&crate::text::printable(out.stderr.trim()), 300)
            ),
            false,
        )),
    }
}

/// Keep this run's lease on the cluster lock while it works: renew it a
/// third of a lease apart on a side channel of the lock host's connection
/// (a new connection when that one is gone). When the lock is another's,
/// or the lock host has not answered for a whole lease, the run has lost
/// it: no host starts changing after that.
pub(super) fn start_renewing(ctx: &Arc<super::Ctx>, host: &str, side: Box<dyn Session>) {
    let task = tokio::spawn(renew(ctx.clone(), host.to_string(), Some(side)));
    *ctx.barrier.renewer.lock().unwrap() = Some(task);
}

async fn renew(ctx: Arc<super::Ctx>, host: String, mut side: Option<Box<dyn Session>>) {
    use std::time::Duration;
    let lease = Duration::from_secs(crate::os::lock_lease());
    let every = lease / 3;
    let mut kept = tokio::time::Instant::now();
    let lost = |why: String| {
        ctx.reporter.say(&format!(
            "warning: this run lost the cluster lock on {host}: {why}; no further host starts changing"
        ));
        *ctx.barrier.lock_lost.lock().unwrap() =
            Some(format!("this run lost the cluster lock on {host}: {why}"));
    };
    loop {
        tokio::time::sleep(every).await;
        if side.is_none()
            && let Some(h) = ctx.cluster.inventory.host(&host)
        {
            let trace = crate::transport::Trace::new();
            side = tokio::time::timeout(
                every,
                step::connect(&ctx, h, crate::os::interpreter(h.os), &trace),
            )
            .await
            .ok()
            .and_then(Result::ok);
        }
        let script = crate::os::renew_script(&ctx.renderer, &ctx.cluster.run_id);
        let answer = match side.as_mut() {
            Some(s) => tokio::time::timeout(every, s.run(&script))
                .await
                .ok()
                .and_then(Result::ok),
            None => None,
        };
        match answer {
            Some(o) if o.stdout.contains("KWL renewed") => kept = tokio::time::Instant::now(),
            Some(o) if o.stdout.contains("KWL lost") => {
                lost("another run or `kwinctl unlock` broke it".into());
                break;
            }
            _ => {
                if let Some(s) = side.take() {
                    s.close().await;
                }
                if kept.elapsed() >= lease {
                    lost(format!(
                        "{host} did not confirm its lease for {}s",
                        lease.as_secs()
                    ));
                    break;
                }
            }
        }
    }
    if let Some(s) = side {
        s.close().await;
    }
}

/// What the lock script said (its lines come from the lock host: printed
/// only through `printable`).
#[derive(Debug, Default)]
pub(crate) struct LockAnswer {
    /// It broke a lock whose lease had run out.
    pub broken: Option<Broken>,
    pub what: What,
}

#[derive(Debug)]
pub(crate) struct Broken {
    /// Seconds since that lock was taken.
    pub age: String,
    /// Seconds since its lease ran out.
    pub expired: String,
    pub owner: String,
}

/// Who holds the lock.
#[derive(Debug, Default)]
pub(crate) struct Held {
    /// Seconds left of its lease.
    pub left: String,
    /// Seconds since it was taken.
    pub age: String,
    pub owner: String,
    pub run: String,
}

#[derive(Debug, Default)]
pub(crate) enum What {
    Taken,
    Changed(String),
    Held(Held),
    /// No lock (`kwinctl unlock`).
    Free,
    /// `kwinctl unlock` broke it.
    Broke,
    #[default]
    Nothing,
}

pub(crate) fn read_lock(stdout: &str) -> LockAnswer {
    let mut a = LockAnswer::default();
    let mut held: Option<Held> = None;
    let mut broke = false;
    for line in stdout.lines() {
        let Some(rest) = line.strip_prefix("KWL ") else {
            continue;
        };
        let (what, value) = rest.split_once(' ').unwrap_or((rest, ""));
        let value = crate::text::printable(value);
        match what {
            "taken" => a.what = What::Taken,
            "changed" => a.what = What::Changed(value),
            "free" => a.what = What::Free,
            "broke" => broke = true,
            "broken" => {
                let mut f = value.splitn(3, ' ');
                a.broken = Some(Broken {
                    age: f.next().unwrap_or_default().to_string(),
                    expired: f.next().unwrap_or_default().to_string(),
                    owner: f.next().unwrap_or_default().to_string(),
                });
            }
            "held" => held.get_or_insert_with(Held::default).left = value,
            "age" => held.get_or_insert_with(Held::default).age = value,
            "owner" => held.get_or_insert_with(Held::default).owner = value,
            "run" => held.get_or_insert_with(Held::default).run = value,
            _ => {}
        }
    }
    if let (What::Nothing, Some(h)) = (&a.what, held) {
        a.what = if broke { What::Broke } else { What::Held(h) };
    }
    a
}

/// Release the cluster lock (when this run took it) on the lock host's
/// connection, and close that connection.
pub(super) async fn release(ctx: &Ctx, lock_host: &str, registry: &[String]) {
    if let Some(task) = ctx.barrier.renewer.lock().unwrap().take() {
        task.abort();
    }
    let Some(mut s) = ctx.barrier.lock_session.lock().await.take() else {
        return;
    };
    if ctx.barrier.lock_taken.load(Ordering::SeqCst) {
        let script = crate::os::unlock_script(&ctx.renderer, &ctx.cluster.run_id, registry);
        match step::call(ctx, &mut s, lock_host, "cluster unlock", script).await {
            Ok(o) if o.stdout.contains("KWL released") => {}
            Ok(_) => ctx.reporter.say(
                "warning: the cluster lock was no longer this run's when it ended (its lease ran out, or `kwinctl unlock` broke it)",
            ),
            Err(e) => ctx.reporter.say(&format!(
                "warning: cannot release the cluster lock: {e}; it clears by itself within {}s (its lease)",
                crate::os::lock_lease()
            )),
        }
    }
    super::step::close_traced(ctx, lock_host, s).await;
}
