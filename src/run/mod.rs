//! The fan-out: one task per host, bounded concurrency, retries of transient
//! connection failures, Ctrl-C / SIGTERM, and the order in which hosts'
//! results are announced. What a host goes through depends on the command,
//! one file each: `plan.rs`, `verify.rs`, `converge.rs` (`up`), `reset.rs`,
//! built from the steps in `step.rs`; checks across hosts are `cluster.rs`.

mod cluster;
mod converge;
mod host;
mod plan;
mod reset;
mod step;
mod verify;

#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt;
use futures::future::BoxFuture;
use futures::stream::FuturesUnordered;
use tokio::sync::Semaphore;

use crate::alloc::Node;
use crate::inventory::{Host, Role};
use crate::mode::Mode;
use crate::os::Desired;
use crate::outcome::{HostError, HostReport};
use crate::record::RunRecord;
use crate::render::Renderer;
use crate::report::Reporter;
use crate::transport::{self, ConnectOptions, Interpreter, Session, TransportError};
use crate::verify::ReachMode;

pub struct RunOptions {
    pub parallel: usize,
    /// Which peers each node pings when checking.
    pub reach: ReachMode,
    /// Bound on each remote call (connect, probe, apply).
    pub timeout: Duration,
    pub retries: u32,
}

/// Set by the signal handler: no new host starts; running hosts stop at the
/// next step boundary (never in the middle of a script). Holds the exit code
/// the signal asks for (130 for SIGINT, 143 for SIGTERM).
#[derive(Clone, Default)]
pub struct Interrupt(Arc<AtomicI32>);

impl Interrupt {
    pub fn set(&self, exit_code: i32) {
        let _ = self
            .0
            .compare_exchange(0, exit_code, Ordering::SeqCst, Ordering::SeqCst);
    }
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::SeqCst) != 0
    }
    /// The exit code of the signal that interrupted the run, if any.
    pub fn exit_code(&self) -> Option<i32> {
        Some(self.0.load(Ordering::SeqCst)).filter(|c| *c != 0)
    }
}

/// How sessions are opened: the real transports, or a fake in unit tests.
pub trait Connector: Send + Sync {
    fn connect<'a>(
        &'a self,
        host: &'a Host,
        interpreter: Interpreter,
    ) -> BoxFuture<'a, Result<Box<dyn Session>, TransportError>>;
}

impl Connector for ConnectOptions {
    fn connect<'a>(
        &'a self,
        host: &'a Host,
        interpreter: Interpreter,
    ) -> BoxFuture<'a, Result<Box<dyn Session>, TransportError>> {
        Box::pin(transport::connect(host, interpreter, self))
    }
}

/// One host to run on: its inventory entry, its node and its desired state.
pub struct Target {
    pub host: Host,
    pub node: Node,
    pub desired: Desired,
    /// How the host is reached (`ssh user@address:port via ...`), shown by
    /// `plan`, `-v` and the run record.
    pub route: Option<String>,
}

impl Target {
    fn blank(&self) -> HostReport {
        let mut r = HostReport::new(
            &self.host.name,
            self.host.os,
            self.host.address,
            self.node.pod_cidr,
        );
        r.route = self.route.clone();
        r
    }
}

/// What every host task shares.
struct Ctx {
    mode: Mode,
    opts: RunOptions,
    connector: Arc<dyn Connector>,
    renderer: Renderer,
    reporter: Arc<Reporter>,
    interrupt: Interrupt,
    record: Option<Arc<RunRecord>>,
}

/// Run `mode` on every target; reports come back in input order.
pub async fn run_all(
    mode: Mode,
    targets: Vec<Target>,
    opts: RunOptions,
    connector: Arc<dyn Connector>,
    reporter: Arc<Reporter>,
    interrupt: Interrupt,
    record: Option<Arc<RunRecord>>,
) -> Vec<HostReport> {
    let sem = Arc::new(Semaphore::new(opts.parallel.max(1)));
    let ctx = Arc::new(Ctx {
        mode,
        opts,
        connector,
        renderer: crate::os::renderer(),
        reporter,
        interrupt,
        record,
    });
    let mut cluster = cluster::Cluster::new(
        mode,
        targets
            .iter()
            .enumerate()
            .filter(|(_, t)| t.host.role == Role::ControlPlane)
            .map(|(i, _)| i),
    );
    let mut blanks = Vec::new();
    let mut running = FuturesUnordered::new();
    for (i, t) in targets.into_iter().enumerate() {
        blanks.push(t.blank());
        let ctx = ctx.clone();
        let sem = sem.clone();
        let task = tokio::spawn(async move {
            let _permit = sem.acquire_owned().await.expect("semaphore open");
            let start = Instant::now();
            let mut report = if ctx.interrupt.is_set() {
                t.blank().interrupted(false)
            } else {
                host::run(&ctx, &t).await
            };
            report.seconds = start.elapsed().as_secs_f64();
            report
        });
        running.push(async move { (i, task.await) });
    }
    let mut out: Vec<Option<HostReport>> = blanks.iter().map(|_| None).collect();
    while let Some((i, done)) = running.next().await {
        // A bug in one host's task fails that host, not the whole run.
        let report =
            done.unwrap_or_else(|e| blanks[i].clone().failed(HostError::Internal(e.to_string())));
        // Hosts whose results depend on checks across hosts are announced
        // once those checks are done: a host's event never says ok while
        // the summary says failed.
        for ready in cluster.arrived(i, report) {
            ctx.reporter.host_done(&ready.1);
            out[ready.0] = Some(ready.1);
        }
    }
    for ready in cluster.finish() {
        ctx.reporter.host_done(&ready.1);
        out[ready.0] = Some(ready.1);
    }
    out.into_iter()
        .map(|r| r.expect("every host reported"))
        .collect()
}
