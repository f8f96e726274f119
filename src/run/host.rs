//! One host: connect and probe (phase 1), meet the others at the cluster
//! step, then run the command's flow on the same connection (phase 2).

use futures::future::BoxFuture;
use ipnet::Ipv4Net;

use super::coordinate::{Arrival, Go, Ticket};
use super::lease::Handover;
use super::{Ctx, Target, step};
use crate::diff::{Conflict, Diff, Item};
use crate::inventory::Connection;
use crate::mode::Mode;
use crate::os::{NodeOps, WithOps, interpreter};
use crate::outcome::{HostError, HostReport, HostStatus};
use crate::transport::{Session, Trace};
use crate::upgrade::skew::ControlView;
use crate::verify::{Pinged, reach_peers};

/// A host's run; `None` when a host outside `--limit` has nothing to say.
pub(super) async fn run(
    ctx: &Ctx,
    t: &Target,
    i: usize,
    lease: Option<tokio::sync::oneshot::Sender<Handover>>,
    slot: tokio::sync::oneshot::Receiver<tokio::sync::OwnedSemaphorePermit>,
) -> Option<HostReport> {
    let mut ticket = Ticket::new(&ctx.barrier, i, &t.host.name);
    let r = t.blank(guess_pod_cidr(ctx, t), &ctx.cluster.inventory);
    if ctx.interrupt.is_set() {
        return t.selected.then(|| r.interrupted(false));
    }
    // Waiting for a slot and connecting change nothing on the host: an
    // interrupt ends them at once (Ctrl-C is answered within a second even
    // while connections hang until --timeout).
    let trace = Trace::new();
    let connecting = async {
        // (the dispatcher sends every slot: the semaphore is never closed)
        let permit = slot.await.expect("connect slot");
        ctx.reporter.phase(&t.host.name, "connecting");
        trace.mark("connecting", "", 0);
        let session = step::connect(ctx, &t.host, interpreter(t.host.os), &trace).await;
        (permit, session)
    };
    let (permit, session) = tokio::select! {
        biased;
        _ = ctx.interrupt.wait() => return t.selected.then(|| r.interrupted(false)),
        c = connecting => c,
    };
    let session = match session {
        Ok(s) => s,
        Err(e) => {
            if matches!(e, crate::transport::TransportError::UnknownHostKey { .. }) {
                ticket.unverified();
            }
            if !t.selected {
                ctx.reporter.say(&format!(
                    "note: {} (outside --limit) did not answer: {e}; its block is taken from the state file",
                    t.host.name
                ));
            }
            step::emit(ctx, &t.host.name, transport(t), &trace);
            return t.selected.then(|| r.failed(HostError::Connect(e)));
        }
    };
    // The lock host hands the lease a side channel of its connection, once;
    // the lease sends its trace out when it is done with it.
    let handed = lease.is_some();
    if let Some(lease) = lease {
        let side = session.side();
        let _ = lease.send(Handover {
            side,
            trace: trace.clone(),
        });
    }
    let flow = Flow {
        ctx,
        t,
        session,
        ticket,
        permit: Some(permit),
        r,
    };
    let (report, session) = t.desired.ops(&ctx.renderer, &t.host, flow).await;
    session.close().await;
    if !handed {
        step::emit(ctx, &t.host.name, transport(t), &trace);
    }
    report
}

fn transport(t: &Target) -> &'static str {
    match t.host.connection {
        Connection::Ssh(_) => "ssh",
        Connection::WinRm(_) => "winrm",
    }
}

/// The block a host's report names before the allocation is made: the
/// state file's or the pin (`None`: not known yet, shown as pending).
fn guess_pod_cidr(ctx: &Ctx, t: &Target) -> Option<Ipv4Net> {
    let state = &ctx.cluster.state;
    let key = t.host.name.to_ascii_lowercase();
    state
        .pod_cidrs
        .get(&key)
        .copied()
        .or_else(|| state.removed.get(&key).map(|r| r.pod_cidr))
        .or(t.host.pod_cidr)
}

/// The command's flow, for whichever OS the host runs.
struct Flow<'a> {
    ctx: &'a Ctx,
    t: &'a Target,
    session: Box<dyn Session>,
    ticket: Ticket<'a>,
    permit: Option<tokio::sync::OwnedSemaphorePermit>,
    r: HostReport,
}

type Done = (Option<HostReport>, Box<dyn Session>);

impl<'a> WithOps<'a> for Flow<'a> {
    type Out = BoxFuture<'a, Done>;
    fn with<O: NodeOps + 'a>(self, ops: O) -> Self::Out {
        Box::pin(self.go(ops))
    }
}

impl<'a> Flow<'a> {
    async fn go<O: NodeOps + 'a>(mut self, ops: O) -> Done {
        let (ctx, t) = (self.ctx, self.t);
        let selected = t.selected;
        // Phase 1: the probe, with the selected hosts' reachability pings.
        let probed: Vec<Pinged> = if selected && ctx.mode.checks() {
            let others = ctx
                .everyone
                .iter()
                .filter(|p| p.address != t.host.address)
                .cloned()
                .collect();
            reach_peers(t.host.address, others, ctx.opts.reach)
        } else {
            Vec::new()
        };
        let reach: Vec<_> = probed.iter().map(|p| p.address).collect();
        // verify's one call is the probe (see below: phase 2 only judges
        // what it read), so nothing is opened ahead of a next call
        if ctx.mode == Mode::Verify {
            self.session.last_call_next();
        }
        let facts = match step::probe(ctx, &mut self.session, &t.host.name, &ops, &reach).await {
            Ok(f) => f,
            Err(e) => {
                if !selected {
                    ctx.reporter.say(&format!(
                        "note: {} (outside --limit) could not be probed: {e}",
                        t.host.name
                    ));
                }
                let r = self.r.clone().failed(e);
                return (selected.then_some(r), self.session);
            }
        };
        let record = ops.record(&facts, ctx.cluster.inventory.cluster.cluster_cidr);
        self.permit = None;
        let generation = record.generation;
        // the control plane: what the version skew policy is judged by
        let control = match ops.k8s(&facts) {
            crate::verify::K8sView::Nodes(nodes) => Some(ControlView {
                api_server: ops.api_server(&facts),
                nodes,
            }),
            _ => None,
        };
        let decision = self
            .ticket
            .arrive(Arrival::Probed(record.clone(), generation, control))
            .await;

        // This host's node in the cluster the records gave.
        let key = t.host.name.to_ascii_lowercase();
        let node = match (&decision.allocation, decision.nodes.get(&key)) {
            (Err(why), _) => {
                let r = self.r.clone().failed(HostError::Cluster(why.clone()));
                return self.finish(r).await;
            }
            (_, Some(n)) => n.clone(),
            (Ok(a), None) if ctx.mode.resets() => {
                let pod_cidr = record.pod_cidr.unwrap_or(self.r.pod_cidr);
                let id = a.state.cluster_id.clone().unwrap_or_default();
                crate::alloc::lone_node(&ctx.cluster.inventory, &t.host, pod_cidr, &id)
            }
            (Ok(a), None) => {
                let why = a
                    .dispute(&t.host.name)
                    .map(|d| d.reason.clone())
                    .unwrap_or_else(|| "its pod CIDR is not decided".into());
                let mut r = self.r.clone();
                if ctx.mode == Mode::Verify {
                    r.checks.push(crate::verify::Check {
                        name: "pod-cidr".into(),
                        pass: false,
                        detail: why,
                    });
                    r.status = crate::outcome::HostStatus::Failed;
                } else {
                    r = r.failed(HostError::Conflict(Conflict::Allocation(why)));
                }
                return self.finish(r).await;
            }
        };
        self.r.pod_cidr = node.pod_cidr;
        self.r.pod_cidr_pending = false;

        // What the command would change here.
        let work: Result<Diff<O::Action>, Conflict> = match (ctx.mode, selected) {
            (Mode::Reset | Mode::PlanReset, true) => Ok(ops.reset(&node, &facts)),
            (_, true) => ops.diff(&node, &facts),
            (Mode::Up | Mode::Plan, false) => ops.diff(&node, &facts).map(|d| only_peer(&ops, d)),
            (Mode::Reset | Mode::PlanReset, false) if !ctx.removing.is_empty() => ops
                .diff(&node, &facts)
                .map(|d| crate::removal::peer_routes(d, &ctx.removing)),
            (Mode::Verify | Mode::Reset | Mode::PlanReset, false) => Ok(Diff::default()),
        };
        // the run's cluster CA, read once, for who must join and verify's
        // check of a node's certificate (src/identity/issuer.rs)
        if selected && matches!(ctx.mode, Mode::Up | Mode::Verify) {
            super::joining::read_ca(ctx).await;
        }
        let ca = super::joining::ca(ctx);
        // a node that joins the cluster changes too, and one whose
        // kube-proxy's own kubeconfig is not in place (src/join/)
        let proxy = match (ctx.mode, selected && work.is_ok()) {
            (Mode::Up, true) => super::joining::proxy(ctx, &t.host, &node, &ops, &facts).await,
            _ => Ok(None),
        };
        let joins = ctx.mode == Mode::Up
            && selected
            && work.is_ok()
            && (!matches!(proxy, Ok(None))
                || ctx
                    .join
                    .as_ref()
                    .is_some_and(|j| j.rotating() || ops.must_join(&facts, ca).is_some()));
        let changes = joins
            || work.as_ref().is_ok_and(|d| {
                ctx.mode.changes_hosts()
                    && d.changes() > 0
                    && (selected || ctx.opts.with_peer_routes || ctx.mode == Mode::Reset)
            });
        let go = self.ticket.ready(changes).await;
        let mut session = self.session;
        let turn = self.ticket.turn().await;
        let refused = match go {
            // (checked once its turn came: the lease may have been lost
            // while it waited)
            Go::Yes => self.ticket.lock_lost().map(HostError::Refused),
            Go::No(e) => Some(e),
        };
        let r = self.r;
        let mut counted = false;
        let report = match (ctx.mode, selected) {
            (Mode::Plan, true) => {
                let files =
                    super::plan::file_diffs(ctx, &mut session, &t.host.name, &ops, &work).await;
                let mut r = super::plan::plan(&node, work, r);
                r.files = files;
                let lines = super::upgrade::plan_lines(ctx, &t.host, &ops, &facts, &r);
                r.notes.extend(lines);
                r.notes.extend(super::joining::plan_note(&ops, &facts));
                Some(r)
            }
            (Mode::PlanReset, true) => Some(super::plan::plan(&node, work, r)),
            (Mode::Verify, true) => {
                let mesh = decision.mesh.get(&key).map(Vec::as_slice).unwrap_or(&[]);
                Some(super::verify::verify(
                    &ops, &node, &facts, work, &probed, mesh, ca, r,
                ))
            }
            (Mode::Up, true) => {
                // a kubelet upgrade: cordon and drain first (upgrade.rs)
                let mut notes = Vec::new();
                let refusal = refused.is_some();
                let up = super::upgrade::before(
                    ctx, &t.host, &node, &ops, &facts, &work, refusal, &mut notes,
                );
                let (upgrading, mut refused) = match up.await {
                    Ok(u) => (u, refused),
                    Err(e) => (None, Some(e)),
                };
                // a node without an identity of its own joins (src/join/)
                let mut finish = None;
                let mut join_failed = None;
                let placed = match proxy {
                    Ok(Some(script)) if refused.is_none() => {
                        let p = super::joining::place_proxy;
                        p(ctx, &mut session, &t.host, script, &mut notes).await
                    }
                    Ok(_) => Ok(()),
                    Err(e) => Err(e),
                };
                if let Err(e) = placed {
                    join_failed = Some(e.to_string());
                    refused = Some(e);
                }
                if refused.is_none() {
                    let joining = super::joining::before(
                        ctx,
                        &t.host,
                        &mut session,
                        &node,
                        &ops,
                        &facts,
                        &mut notes,
                    );
                    match joining.await {
                        Ok(f) => finish = f,
                        Err(e) => {
                            join_failed = Some(e.to_string());
                            refused = Some(e);
                        }
                    }
                }
                let mut r = super::converge::converge(
                    ctx,
                    &t.host,
                    &mut session,
                    &node,
                    &ops,
                    &facts,
                    work,
                    &probed,
                    refused,
                    r,
                )
                .await;
                r.notes.extend(notes);
                // (a converge with nothing to change does not report a refusal)
                if let Some(why) = join_failed {
                    r = r.failed(HostError::Join(
                        why.trim_start_matches("joining the cluster: ").to_string(),
                    ));
                } else if let Some(f) = finish
                    && r.status != HostStatus::Failed
                {
                    match super::joining::after(ctx, &mut session, &t.host, f).await {
                        Ok(()) if r.status == HostStatus::Ok => r.status = HostStatus::Changed,
                        Ok(()) => {}
                        Err(e) => r = r.failed(e),
                    }
                }
                if let Some(u) = upgrading {
                    r = super::upgrade::after(ctx, &t.host, &mut session, &node, &ops, u, r).await;
                }
                if failed_itself(&r) {
                    self.ticket.failed();
                    // counted before the turn passes on: with --parallel 1
                    // the next host checks --max-fail as soon as it has it
                    ctx.failed();
                    counted = true;
                }
                drop(turn);
                self.ticket.done();
                let r = super::recheck::recheck(
                    ctx,
                    &mut session,
                    &node,
                    &ops,
                    &probed,
                    &self.ticket,
                    r,
                )
                .await;
                Some(super::settle::settle(ctx, &mut session, &node, &ops, &self.ticket, r).await)
            }
            (Mode::Reset, true) => {
                let r = super::reset::reset(ctx, &mut session, &node, &ops, work, refused, r).await;
                Some(super::joining::revoke(ctx, &ops, r).await)
            }
            (Mode::Up | Mode::Plan | Mode::Reset | Mode::PlanReset, false) => {
                super::peers::peers(ctx, &mut session, &node, &ops, work, refused, r).await
            }
            (Mode::Verify, false) => None,
        };
        // counted while this host still holds its turn: the next host sees it
        if selected
            && !counted
            && report
                .as_ref()
                .is_some_and(|r| r.status == HostStatus::Failed)
        {
            ctx.failed();
        }
        (report, session)
    }

    /// End early with `r` (for a selected host): still say "no changes" at
    /// the second barrier.
    async fn finish(mut self, r: HostReport) -> Done {
        // counted before the hosts are let go (no turn is handed out before)
        if self.t.selected && r.status == HostStatus::Failed {
            self.ctx.failed();
        }
        if r.status == HostStatus::Failed {
            self.ticket.failed();
        }
        let _ = self.ticket.ready(false).await;
        (self.t.selected.then_some(r), self.session)
    }
}

/// Whether `r` failed for a reason of its own: not only because peers did
/// not answer its pings (two healthy hosts that cannot reach each other
/// both fail; neither excuses the other).
fn failed_itself(r: &HostReport) -> bool {
    r.status == HostStatus::Failed
        && !(matches!(r.error, Some(HostError::VerifyFailed { .. }))
            && r.failed_checks().all(|c| c.name.starts_with("reach ")))
}

/// Only the changes a host outside `--limit` may get: those that keep its
/// routes to the other nodes right.
fn only_peer<O: NodeOps>(ops: &O, d: Diff<O::Action>) -> Diff<O::Action> {
    Diff {
        items: d
            .items
            .into_iter()
            .map(|i| Item {
                key: i.key,
                action: i.action.filter(|a| ops.peer_change(a)),
            })
            .collect(),
        notes: d.notes,
    }
}
