//! `up`: an action that cuts the host's network while it runs (on Windows
//! the first HNS network: the node's address moves onto the new external
//! vSwitch and the host's connections drop for seconds) runs detached from
//! the connection (`NodeOps::detached`): its start script returns at once,
//! the host records the action's result in a file, and kwinctl reconnects,
//! bounded by `--detach-wait`, until it reads that result. Without it the
//! call carrying the script breaks and a rerun is needed
//! (docs/windows.md, "The vSwitch blip").

use std::time::Duration;

use super::{Ctx, step};
use crate::alloc::Node;
use crate::os::Detached;
use crate::outcome::{CallError, HostError};
use crate::transport::{Output, Session};
use crate::wire::{DetachState, detach_state};

/// How long between two looks at the result.
const POLL: Duration = Duration::from_secs(2);

/// The token naming a detached action's result on the host: this run's id
/// and the action's place, kept to letters, digits and `-`.
pub(super) fn token(run_id: &str, index: usize) -> String {
    let id: String = run_id
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-')
        .take(40)
        .collect();
    format!("{id}-{index}")
}

/// Run a detached action (`what`: its description) and return its result
/// lines (`KWX`/`KWE`, as the script would have printed them). `s` is the
/// session after it: the same one, or a new one when the old one broke.
pub(super) async fn run(
    ctx: &Ctx,
    s: &mut Box<dyn Session>,
    node: &Node,
    d: Detached,
    token: &str,
    what: &str,
) -> Result<Output, HostError> {
    ctx.reporter.phase(
        &node.name,
        &format!("{what} (detached from the connection, which may drop)"),
    );
    let mut alive = match step::call(ctx, s, &node.name, "detach: start", d.start).await {
        Ok(o) => match detach_state(&o.stdout, token) {
            DetachState::Started => true,
            // it did not start: the start script's own failure (KWX/KWE)
            _ => return Ok(o),
        },
        // the call broke, perhaps once the task had started: its result says
        Err(CallError::Transport { .. } | CallError::Timeout { .. }) => false,
    };
    let wait = ctx.opts.detach_wait;
    let deadline = tokio::time::Instant::now() + wait;
    let host = ctx
        .cluster
        .inventory
        .hosts
        .iter()
        .find(|h| h.name == node.name)
        .expect("a run's node is in its inventory");
    let mut last = String::from("no answer yet");
    // whether `s` was opened after the action started: a connection from
    // before it may be dropped with the host's network even after it
    // carried the result (the poll that read it was let in just before)
    let mut fresh = false;
    let mut done: Option<Output> = None;
    loop {
        tokio::select! {
            biased;
            _ = ctx.interrupt.wait() => {
                return Err(HostError::Detached(format!(
                    "{what}: interrupted while waiting for its result; it runs on, detached, on {}. \
                     Check on the host {}; then run `kwinctl up` again: it resumes from what the host has",
                    node.name, d.check
                )));
            }
            _ = tokio::time::sleep(POLL) => {}
        }
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() {
            if done.is_some() {
                return Err(HostError::Detached(format!(
                    "{what}: done, but {} did not answer on a new connection within --detach-wait                      {}s (last: {last}); run `kwinctl up` again: it goes on from there",
                    node.name,
                    wait.as_secs()
                )));
            }
            return Err(HostError::Detached(never_came(
                node, what, wait, &last, &d.check,
            )));
        }
        if !alive {
            ctx.reporter.phase(
                &node.name,
                &format!("reconnecting for the result of: {what}"),
            );
            match reconnect(ctx, s, host, left).await {
                Ok(()) => {
                    alive = true;
                    fresh = true;
                    if let Some(o) = done.take() {
                        return Ok(o);
                    }
                }
                Err(e) => {
                    last = e;
                    continue;
                }
            }
        }
        match step::call(ctx, s, &node.name, "detach: result", d.result.clone()).await {
            Ok(o) => match detach_state(&o.stdout, token) {
                // the rest of the run goes over a connection opened after
                // the action: none from before it is trusted to live on
                DetachState::Done if !fresh => {
                    alive = false;
                    done = Some(o);
                }
                DetachState::Done => return Ok(done.unwrap_or(o)),
                DetachState::Missing => {
                    return Err(HostError::Detached(format!(
                        "{what}: its detached task is not on {} and left no result: it never started \
                         (the connection broke while starting it); nothing of it was done. Run `kwinctl up` again",
                        node.name
                    )));
                }
                DetachState::Pending => last = "its task is still running".into(),
                DetachState::Started | DetachState::Unknown => {
                    last = "the host's answer did not say (see the run record)".into();
                }
            },
            Err(e) => {
                last = e.to_string();
                alive = false;
            }
        }
    }
}

/// Replace `s` with a session on a new connection, bounded by `left`:
/// Err says why not (the host's network may still be down).
async fn reconnect(
    ctx: &Ctx,
    s: &mut Box<dyn Session>,
    host: &crate::inventory::Host,
    left: Duration,
) -> Result<(), String> {
    let trace = s.trace().cloned().unwrap_or_default();
    let interpreter = crate::os::interpreter(host.os);
    match tokio::time::timeout(left, step::connect(ctx, host, interpreter, &trace)).await {
        Ok(Ok(new)) => {
            let old = std::mem::replace(s, new);
            // (a broken connection's polite close is not waited for)
            let _ = tokio::time::timeout(Duration::from_secs(2), old.close()).await;
            Ok(())
        }
        Ok(Err(e)) => Err(format!("reconnecting: {e}")),
        Err(_) => Err("reconnecting: no answer in time".into()),
    }
}

/// The message when the result did not come within the bound.
fn never_came(node: &Node, what: &str, wait: Duration, last: &str, check: &str) -> String {
    format!(
        "{what}: no result from {host} within --detach-wait {secs}s (last: {last}); it ran detached \
         from the connection because it drops the host's network, and may be done, half done or \
         still running. Check on the host {check}; then run `kwinctl up` again: it resumes from \
         what the host has",
        host = node.name,
        secs = wait.as_secs(),
    )
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_token_keeps_to_safe_characters() {
        assert_eq!(
            super::token("20261129T040000Z-a1b2", 3),
            "20261129T040000Z-a1b2-3"
        );
        assert_eq!(super::token("x/..\\'y", 0), "xy-0");
    }
}
