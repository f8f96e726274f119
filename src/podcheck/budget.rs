//! The bounds of `verify --pods` (issue 38, P6): every kubectl call on the
//! control plane runs under `timeout --timeout`, every remote call is also
//! bounded here (a connection that stalls), the whole check has a budget
//! made of those bounds, and a signal (SIGINT, SIGTERM) ends the call in
//! progress at once — the caller then deletes the pods.
//!
//! The budget, for `n` nodes and `T` = `--timeout`:
//! `T` (get nodes) + `T` (apply) + `pod_check.start_timeout` + `T` (the
//! last get pods) + `ceil(3n / EXEC_PARALLEL) × T` (the checks, at most
//! [`EXEC_PARALLEL`] at once) + `T` (delete) + [`GRACE`] per call.

use std::time::{Duration, Instant};

use crate::transport::Session;

/// How many `kubectl exec` checks run at once on the control plane.
pub const EXEC_PARALLEL: usize = 8;
/// What a remote call may take beyond its kubectl's own `timeout` (the
/// connection, the shell).
pub const GRACE: Duration = Duration::from_secs(5);
/// How often a call in progress looks for a signal.
const POLL: Duration = Duration::from_millis(100);

/// Why a remote call ended without an answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// A signal: the caller deletes the pods and stops.
    Interrupted,
    /// Out of time or the connection failed: said in words.
    Failed(String),
}

impl std::fmt::Display for Ended {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Ended::Interrupted => f.write_str("interrupted: the test pods were deleted"),
            Ended::Failed(s) => f.write_str(s),
        }
    }
}

/// The time `verify --pods` may take, and the bound of each call.
pub struct Budget {
    /// `--timeout`: each kubectl call's bound.
    pub call: Duration,
    total: Duration,
    deadline: Instant,
}

/// How many rounds the checks of `nodes` nodes take (3 checks a node).
pub fn exec_rounds(checks: usize) -> u32 {
    checks.div_ceil(EXEC_PARALLEL).max(1) as u32
}

impl Budget {
    pub fn new(call: Duration, start_timeout: Duration, nodes: usize) -> Budget {
        let calls = 4 + exec_rounds(3 * nodes);
        let total = call * calls + start_timeout + GRACE * (calls + 1);
        Budget {
            call,
            total,
            deadline: Instant::now() + total,
        }
    }

    /// `--timeout`, in seconds, for the scripts' `timeout` commands.
    pub fn secs(&self) -> u64 {
        self.call.as_secs().max(1)
    }

    /// The budget in words, for a message.
    fn said(&self) -> String {
        format!(
            "verify --pods ran out of its budget of {}s (--timeout {}s for each kubectl call, the checks {} at once, and pod_check.start_timeout)",
            self.total.as_secs(),
            self.secs(),
            EXEC_PARALLEL
        )
    }

    /// Run `script` on the control plane (`what` it does, for messages),
    /// within `bound` (its kubectl calls' own time) plus [`GRACE`] and
    /// within the budget (`cleanup`: its own bound only, so the pods are
    /// deleted even when the budget is spent); `stop()` ends it at once.
    pub async fn run(
        &self,
        session: &mut dyn Session,
        script: &str,
        what: &str,
        bound: Duration,
        cleanup: bool,
        stop: &(dyn Fn() -> bool + Sync),
    ) -> Result<(u32, String, String), Ended> {
        if !cleanup && stop() {
            return Err(Ended::Interrupted);
        }
        let mine = bound + GRACE;
        let left = self.deadline.saturating_duration_since(Instant::now());
        let (limit, by_budget) = if cleanup || mine <= left {
            (mine, false)
        } else {
            (left, true)
        };
        let call = session.run(script);
        tokio::pin!(call);
        let until = tokio::time::sleep(limit);
        tokio::pin!(until);
        loop {
            tokio::select! {
                r = &mut call => {
                    let o = r.map_err(|e| Ended::Failed(format!("the control plane: {e}")))?;
                    return Ok((o.exit.unwrap_or(255), o.stdout, o.stderr));
                }
                _ = &mut until => {
                    return Err(Ended::Failed(if by_budget {
                        format!("{} while waiting for {what}", self.said())
                    } else {
                        format!(
                            "{what}: no answer from the control plane within {}s (--timeout {}s and {}s for the connection)",
                            limit.as_secs(),
                            self.secs(),
                            GRACE.as_secs()
                        )
                    }));
                }
                _ = tokio::time::sleep(POLL), if !cleanup => {
                    if stop() {
                        return Err(Ended::Interrupted);
                    }
                }
            }
        }
    }
}

/// What a kubectl call's exit says: 124 is `timeout`'s, when the call did
/// not finish within `--timeout`.
pub fn exit_said(rc: u32, call: &str, secs: u64) -> Option<String> {
    (rc == 124).then(|| format!("{call} did not finish within --timeout {secs}s"))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    use futures::FutureExt;
    use futures::future::BoxFuture;

    use crate::inventory::Os;
    use crate::transport::{Output, Session, TransportError};

    use super::super::{Options, Subject, check};

    /// A control plane whose kubectl lists two Linux nodes, starts their
    /// pods at once, and whose `kubectl exec` never answers; it keeps the
    /// scripts it was given.
    struct Hanging(Arc<Mutex<Vec<String>>>);

    fn out(stdout: &str) -> Output {
        Output {
            stdout: stdout.into(),
            stderr: String::new(),
            exit: Some(0),
            dropped: 0,
        }
    }

    impl Session for Hanging {
        fn run<'a>(&'a mut self, script: &'a str) -> BoxFuture<'a, Result<Output, TransportError>> {
            self.0.lock().unwrap().push(script.to_string());
            let nodes = r#"{"items":[
              {"metadata":{"name":"h1","labels":{"kubernetes.io/os":"linux"}},"status":{"addresses":[{"type":"InternalIP","address":"198.18.1.2"}]}},
              {"metadata":{"name":"h2","labels":{"kubernetes.io/os":"linux"}},"status":{"addresses":[{"type":"InternalIP","address":"198.18.1.3"}]}}]}"#;
            let pods = r#"{"items":[
              {"metadata":{"name":"kwinctl-ab12-h1"},"status":{"phase":"Running","podIP":"198.19.0.2"}},
              {"metadata":{"name":"kwinctl-ab12-h2"},"status":{"phase":"Running","podIP":"198.19.1.2"}}]}"#;
            let answer = if script.contains("get nodes") {
                Some(out(nodes))
            } else if script.contains("get pods") {
                Some(out(pods))
            } else if script.contains("kubectl exec") {
                None
            } else {
                Some(out(""))
            };
            async move {
                match answer {
                    Some(o) => Ok(o),
                    None => futures::future::pending().await,
                }
            }
            .boxed()
        }
        fn close(self: Box<Self>) -> BoxFuture<'static, ()> {
            async {}.boxed()
        }
    }

    fn subjects() -> Vec<Subject> {
        ["h1", "h2"]
            .iter()
            .enumerate()
            .map(|(i, h)| Subject {
                host: h.to_string(),
                node: h.to_string(),
                os: Os::Linux,
                address: format!("198.18.1.{}", i + 2).parse().unwrap(),
                pod_cidr: format!("198.19.{i}.0/24").parse().unwrap(),
                host_dns: false,
            })
            .collect()
    }

    fn options(call: u64) -> Options {
        Options {
            namespace: "default".into(),
            images: BTreeMap::new(),
            domain: "cluster.local".into(),
            start_timeout: Duration::from_secs(60),
            call_timeout: Duration::from_secs(call),
        }
    }

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn a_hanging_kubectl_exec_ends_at_its_bound_and_the_pods_are_deleted() {
        let said = Arc::new(Mutex::new(Vec::new()));
        let mut s = Hanging(said.clone());
        let start = Instant::now();
        let r = rt().block_on(check(
            &mut s,
            &subjects(),
            &options(1),
            "ab12",
            &|| false,
            &|_| {},
        ));
        // 1s of --timeout and the connection's grace, not 30s a check
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "{:?}",
            start.elapsed()
        );
        let e = r.unwrap_err();
        assert!(
            e.contains("kubectl exec: no answer from the control plane within 6s"),
            "{e}"
        );
        let scripts = said.lock().unwrap();
        assert!(
            scripts.last().unwrap().contains("kubectl delete pods"),
            "{scripts:?}"
        );
        // every kubectl call is bounded by --timeout, the checks run at once:
        // each Linux pod's connect to the other and its two lookups
        // (podcheck::dns_lookups)
        let exec = scripts.iter().find(|s| s.contains("kubectl exec")).unwrap();
        assert_eq!(exec.matches("timeout 1 kubectl exec").count(), 6, "{exec}");
        assert_eq!(exec.matches(") &\n").count(), 6, "{exec}");
        assert!(
            scripts
                .iter()
                .all(|s| !s.contains("timeout 30") && !s.contains("timeout 60"))
        );
    }

    #[test]
    fn a_signal_ends_the_call_in_progress_and_the_pods_are_deleted() {
        let said = Arc::new(Mutex::new(Vec::new()));
        let mut s = Hanging(said.clone());
        let start = Instant::now();
        let stop = move || start.elapsed() > Duration::from_millis(500);
        let r = rt().block_on(check(
            &mut s,
            &subjects(),
            &options(60),
            "ab12",
            &stop,
            &|_| {},
        ));
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "{:?}",
            start.elapsed()
        );
        assert_eq!(r.unwrap_err(), "interrupted: the test pods were deleted");
        let scripts = said.lock().unwrap();
        assert!(
            scripts.last().unwrap().contains("kubectl delete pods"),
            "{scripts:?}"
        );
    }

    #[test]
    fn the_budget_grows_with_the_checks_and_the_start_timeout() {
        let b = super::Budget::new(Duration::from_secs(20), Duration::from_secs(120), 2);
        // 4 calls + 1 round of 6 checks, 20s each; 120s to start; 6 graces
        assert_eq!(b.total, Duration::from_secs(5 * 20 + 120 + 6 * 5));
        let b = super::Budget::new(Duration::from_secs(20), Duration::from_secs(120), 10);
        // 30 checks: 4 rounds of 8
        assert_eq!(b.total, Duration::from_secs(8 * 20 + 120 + 9 * 5));
    }
}
