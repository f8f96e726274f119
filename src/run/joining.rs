//! The runner's side of a Windows node's join (the capability is
//! src/join/): on `up`, a node that must join gets the run's bootstrap
//! kubeconfig before its converge, and its kubelet bootstraps after it.

use super::{Ctx, step};
use crate::alloc::Node;
use crate::inventory::{Host, Os, Role};
use crate::os::NodeOps;
use crate::outcome::{HostError, HostReport, HostStatus};
use crate::transport::{Interpreter, Session, Trace};

/// `up` joining Windows nodes with their own identity: the run's joiner
/// (`verify` has one too, that only reads the cluster CA).
pub(super) fn joiner(
    mode: crate::mode::Mode,
    cluster: &super::Cluster,
    opts: &super::RunOptions,
) -> Option<crate::join::Joiner> {
    use crate::mode::Mode;
    let reads = matches!(mode, Mode::Up | Mode::Verify);
    (reads && crate::os::joins_nodes(&cluster.inventory)).then(|| {
        crate::join::Joiner::new(
            cluster
                .inventory
                .cluster
                .api_server
                .as_deref()
                .unwrap_or(""),
            cluster.state.ca_pin.clone(),
            opts.accept_ca.clone(),
            opts.timeout.max(std::time::Duration::from_secs(60)),
        )
    })
}

/// A session to the control plane (its Linux control-plane host of lowest
/// address), where the cluster CA and the bootstrap token come from.
async fn control_plane(ctx: &Ctx) -> Result<Box<dyn Session>, String> {
    let cp = ctx
        .cluster
        .inventory
        .hosts
        .iter()
        .filter(|h| h.os == Os::Linux && h.role == Role::ControlPlane)
        .min_by_key(|h| h.address)
        .ok_or_else(|| "the inventory has no Linux control-plane host".to_string())?;
    step::connect(ctx, cp, Interpreter::Sh, &Trace::new())
        .await
        .map_err(|e| e.to_string())
}

/// The run's cluster CA read from the control plane and judged against
/// the state file's pin, once per run (nothing when the cluster does not
/// join nodes with their own identity).
pub(super) async fn read_ca(ctx: &Ctx) {
    if let Some(j) = &ctx.join {
        // (kept in the joiner: each node's checks read it, and a failure)
        let _ = j.cluster_ca(control_plane(ctx)).await;
    }
}

/// The run's cluster CA, once [`read_ca`] read it.
pub(super) fn ca(ctx: &Ctx) -> Option<&crate::identity::issuer::Anchor> {
    ctx.join.as_ref().and_then(|j| j.ca())
}

/// `plan`'s note for a node `up` would join, and why. plan reads no
/// cluster CA: a certificate another CA signed is found by `up` and
/// `verify`, which read it.
pub(super) fn plan_note<O: NodeOps>(ops: &O, facts: &O::Facts) -> Option<String> {
    ops.must_join(facts, None)
        .map(|why| format!("up would join this node to the cluster with a bootstrap token: {why}"))
}

/// Before the converge: when the node must join, the run's bootstrap
/// kubeconfig placed on it. `Ok(Some(script))`: the script to run after
/// the converge.
pub(super) async fn before<O: NodeOps>(
    ctx: &Ctx,
    host: &Host,
    session: &mut Box<dyn Session>,
    node: &Node,
    ops: &O,
    facts: &O::Facts,
    notes: &mut Vec<String>,
) -> Result<Option<String>, HostError> {
    let Some(joiner) = &ctx.join else {
        return Ok(None);
    };
    let rotated = || {
        joiner
            .rotating()
            .then(|| "the cluster CA was rotated (up --accept-ca)".to_string())
    };
    let Some(why) = ops.must_join(facts, ca(ctx)).or_else(rotated) else {
        return Ok(None);
    };
    ctx.reporter
        .phase(&host.name, "join: getting a bootstrap token");
    let conf = joiner
        .bootstrap_kubeconfig(control_plane(ctx))
        .await
        .map_err(HostError::Join)?;
    let Some((place, finish)) = ops.join_scripts(node, &conf) else {
        return Ok(None);
    };
    ctx.reporter
        .phase(&host.name, "join: placing the bootstrap kubeconfig");
    run(ctx, session, &host.name, "join", place, 3).await?;
    notes.push(format!(
        "joined the cluster with an identity of its own ({why}): a bootstrap token, then the kubelet's own client certificate"
    ));
    Ok(Some(finish))
}

/// Before the converge decides: kube-proxy's own kubeconfig for the node
/// (src/join/proxy.rs), and the script placing it when the node does not
/// hold exactly it (`Ok(None)`: nothing to change; a rerun with the same
/// token Secret changes nothing).
pub(super) async fn proxy<O: NodeOps>(
    ctx: &Ctx,
    host: &Host,
    node: &Node,
    ops: &O,
    facts: &O::Facts,
) -> Result<Option<String>, HostError> {
    let (Some(joiner), Some(name)) = (&ctx.join, ops.proxy_node()) else {
        return Ok(None);
    };
    ctx.reporter
        .phase(&host.name, "kube-proxy: its own credential");
    let conf = joiner
        .proxy_kubeconfig(&name, control_plane(ctx))
        .await
        .map_err(HostError::Join)?;
    Ok(ops.proxy_script(node, facts, &conf))
}

/// kube-proxy's kubeconfig placed (the script [`proxy`] gave).
pub(super) async fn place_proxy(
    ctx: &Ctx,
    session: &mut Box<dyn Session>,
    host: &Host,
    script: String,
    notes: &mut Vec<String>,
) -> Result<(), HostError> {
    ctx.reporter
        .phase(&host.name, "kube-proxy: placing its kubeconfig");
    run(ctx, session, &host.name, "kube-proxy credential", script, 1).await?;
    notes.push(format!(
        "kube-proxy has a credential of its own: ServiceAccount {}/{}, token Secret {}",
        crate::join::proxy::NAMESPACE,
        crate::join::proxy::SERVICE_ACCOUNT,
        crate::join::proxy::secret_name(&host.node_name().to_ascii_lowercase())
    ));
    Ok(())
}

/// `reset` of a node whose kube-proxy had a credential of its own: its
/// token Secret deleted on the control plane (the token stops
/// authenticating at once); the other nodes' stay.
pub(super) async fn revoke<O: NodeOps>(ctx: &Ctx, ops: &O, r: HostReport) -> HostReport {
    let Some(name) = ops.proxy_node() else {
        return r;
    };
    if !matches!(r.status, HostStatus::Ok | HostStatus::Changed)
        || ctx.mode != crate::mode::Mode::Reset
    {
        return r;
    }
    ctx.reporter
        .phase(&r.host, "kube-proxy: deleting its credential");
    let done = match control_plane(ctx).await {
        Ok(mut s) => {
            let d = crate::join::proxy::delete(&mut *s, &name).await;
            s.close().await;
            d
        }
        Err(e) => Err(format!(
            "cannot reach the control plane to delete kube-proxy's credential for {name} ({e}); \
             delete it there: `kubectl delete secret {} -n {}`",
            crate::join::proxy::secret_name(&name),
            crate::join::proxy::NAMESPACE
        )),
    };
    match done {
        Ok(()) => r,
        Err(e) => r.failed(HostError::Revoke(e)),
    }
}

/// After the converge: the kubelet bootstraps, the bootstrap kubeconfig goes.
pub(super) async fn after(
    ctx: &Ctx,
    session: &mut Box<dyn Session>,
    host: &Host,
    finish: String,
) -> Result<(), HostError> {
    ctx.reporter
        .phase(&host.name, "join: waiting for the kubelet's certificate");
    run(ctx, session, &host.name, "join", finish, 1).await
}

async fn run(
    ctx: &Ctx,
    session: &mut Box<dyn Session>,
    host: &str,
    what: &str,
    script: String,
    actions: usize,
) -> Result<(), HostError> {
    let o = step::call(ctx, session, host, what, script)
        .await
        .map_err(|e| HostError::Join(e.to_string()))?;
    match crate::wire::action_results(&o.stdout, actions) {
        (res, None) if res.len() == actions => Ok(()),
        (res, Some(_)) => Err(HostError::Join(
            res.last()
                .map(|(_, e)| crate::text::clip(&crate::text::printable(e), 400))
                .unwrap_or_default(),
        )),
        _ => Err(HostError::Join(format!(
            "the host's script ended early (exit {}): rerun `kwinctl up`",
            o.exit.map_or("none".into(), |e| e.to_string())
        ))),
    }
}

/// The run's joins end: its bootstrap token deleted, a new CA pin kept in
/// the state file; what the operator must hear, one line each.
pub(super) async fn end(ctx: &Ctx) -> Vec<String> {
    let Some(j) = &ctx.join else {
        return Vec::new();
    };
    let ended = j.end().await;
    let mut lines: Vec<String> = ended.failure.into_iter().collect();
    if let Some(pin) = ended.pin {
        let cl = &ctx.cluster;
        let saved = crate::state::State::load(&cl.state_path, &cl.inventory.cluster.name)
            .map_err(|e| e.to_string())
            .and_then(|mut s| {
                s.ca_pin = Some(pin.clone());
                s.save(&cl.state_path).map_err(|e| e.to_string())
            });
        if let Err(e) = saved {
            lines.push(format!(
                "the cluster CA's pin {} could not be kept in the state file ({e}): the next run pins it again",
                pin.hash
            ));
        }
    }
    lines
}
