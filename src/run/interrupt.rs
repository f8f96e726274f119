//! The run's interruption: what SIGINT/SIGTERM set, and what every waiting
//! step watches.

use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};

/// Set by the signal handler: no new host starts; hosts still waiting for a
/// connection slot or connecting stop at once (nothing was changed on them);
/// running hosts stop at the next step boundary (never in the middle of a
/// script). Holds the exit code the signal asks for (130 for SIGINT, 143
/// for SIGTERM).
#[derive(Clone, Default)]
pub struct Interrupt(Arc<(AtomicI32, tokio::sync::Notify)>);

impl Interrupt {
    pub fn set(&self, exit_code: i32) {
        let _ = self
            .0
            .0
            .compare_exchange(0, exit_code, Ordering::SeqCst, Ordering::SeqCst);
        self.0.1.notify_waiters();
    }
    pub fn is_set(&self) -> bool {
        self.0.0.load(Ordering::SeqCst) != 0
    }
    /// The exit code of the signal that interrupted the run, if any.
    pub fn exit_code(&self) -> Option<i32> {
        Some(self.0.0.load(Ordering::SeqCst)).filter(|c| *c != 0)
    }
    /// Returns once the run is interrupted.
    pub async fn wait(&self) {
        loop {
            let notified = self.0.1.notified();
            tokio::pin!(notified);
            // registered before the check: a `set` in between still wakes it
            notified.as_mut().enable();
            if self.is_set() {
                return;
            }
            notified.await;
        }
    }
}
