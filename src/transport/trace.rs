//! The time of each protocol step of one host's connection, so that the
//! round trips a run costs over a slow link can be counted (issue 16): what
//! `-v` prints and the run record keeps.
//!
//! Each step says how many request/reply exchanges with the server it
//! waited for (`waits`). The counts are what the protocol and the library
//! in use do at that step, read from their source (cited where each step
//! is marked); the times show whether they hold: through a link of RTT `r`,
//! a step with `waits = n` takes about `n × r` after the step before it.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use serde::Serialize;

/// One step of a host's connection.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Step {
    /// Milliseconds since the host's connection began.
    pub ms: f64,
    /// What happened (`tcp connected`, `auth done`, `request Receive`, ...).
    pub step: String,
    /// Details in kwinctl's own words (never text a host sent).
    #[serde(skip_serializing_if = "String::is_empty")]
    pub detail: String,
    /// Request/reply exchanges with the server this step waited for.
    pub waits: u32,
}

struct Inner {
    start: Instant,
    steps: Vec<Step>,
}

/// A host's steps, shared by the code that opens and uses its connection.
#[derive(Clone)]
pub struct Trace(Arc<Mutex<Inner>>);

impl Default for Trace {
    fn default() -> Self {
        Trace::new()
    }
}

impl Trace {
    /// A trace whose clock starts now.
    pub fn new() -> Trace {
        Trace(Arc::new(Mutex::new(Inner {
            start: Instant::now(),
            steps: Vec::new(),
        })))
    }

    /// Mark a step now.
    pub fn mark(&self, step: &str, detail: impl Into<String>, waits: u32) {
        let mut t = self.0.lock().unwrap();
        let ms = t.start.elapsed().as_secs_f64() * 1000.0;
        t.steps.push(Step {
            ms: (ms * 10.0).round() / 10.0,
            step: step.to_string(),
            detail: detail.into(),
            waits,
        });
    }

    /// The steps so far, in order.
    pub fn steps(&self) -> Vec<Step> {
        self.0.lock().unwrap().steps.clone()
    }
}

/// The request/reply exchanges of `steps`, in all.
pub fn exchanges(steps: &[Step]) -> u32 {
    steps.iter().map(|s| s.waits).sum()
}

/// `-v`'s lines for one host: one per step, then the count.
pub fn lines(host: &str, transport: &str, steps: &[Step]) -> Vec<String> {
    let mut v: Vec<String> = steps
        .iter()
        .map(|s| {
            let waits = match s.waits {
                0 => String::new(),
                1 => " [1 exchange]".to_string(),
                n => format!(" [{n} exchanges]"),
            };
            let detail = if s.detail.is_empty() {
                String::new()
            } else {
                format!(": {}", s.detail)
            };
            format!("{host}: trace {:>9.1} ms {}{detail}{waits}", s.ms, s.step)
        })
        .collect();
    if !steps.is_empty() {
        v.push(format!(
            "{host}: trace {transport}: {} request/reply exchanges",
            exchanges(steps)
        ));
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_are_in_order_and_counted() {
        let t = Trace::new();
        t.mark("tcp connected", "", 1);
        std::thread::sleep(std::time::Duration::from_millis(2));
        t.mark("kex done", "host key checked", 2);
        let s = t.steps();
        assert_eq!(s.len(), 2);
        assert!(s[1].ms >= s[0].ms + 1.0, "{s:?}");
        assert_eq!(exchanges(&s), 3);
        let l = lines("n1", "ssh", &s);
        assert_eq!(l.len(), 3);
        assert!(
            l[1].contains("kex done: host key checked [2 exchanges]"),
            "{l:?}"
        );
        assert_eq!(l[2], "n1: trace ssh: 3 request/reply exchanges");
    }
}
