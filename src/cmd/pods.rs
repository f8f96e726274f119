//! `verify --pods` at the end of a `verify` run: the test pods through the
//! first Linux control plane's kubectl (`crate::podcheck`), reported for the
//! selected nodes.

use super::Inputs;
use crate::report::Reporter;
use crate::run::{self, Interrupt};
use crate::transport::{self, ConnectOptions};

/// `verify --pods` after the hosts' checks: pods start on every node (the
/// others are the selected ones' targets); only the selected nodes'
/// results are reported.
pub(super) async fn verify_pods(
    l: &Inputs,
    connect: &ConnectOptions,
    ran: &run::Ran,
    reporter: &Reporter,
    interrupt: &Interrupt,
    selected: &dyn Fn(&str) -> bool,
) -> Result<Vec<crate::podcheck::NodePods>, String> {
    let r = pod_check(l, connect, ran, reporter, interrupt)
        .await
        .map(|all| {
            all.into_iter()
                .filter(|n| selected(&n.host))
                .collect::<Vec<_>>()
        });
    match &r {
        Ok(results) => results.iter().for_each(|n| reporter.pods(n)),
        Err(e) => reporter.say(&format!("pods: FAILED: {e}")),
    }
    r
}

/// `verify --pods`: the selected nodes' test pods, through the first Linux
/// control plane's kubectl.
async fn pod_check(
    l: &Inputs,
    connect: &ConnectOptions,
    ran: &run::Ran,
    reporter: &Reporter,
    interrupt: &Interrupt,
) -> Result<Vec<crate::podcheck::NodePods>, String> {
    use crate::inventory::{Os, Role, WindowsProfile};
    let cp = l
        .inv
        .hosts
        .iter()
        .find(|h| h.os == Os::Linux && h.role == Role::ControlPlane)
        .ok_or("the inventory has no Linux control-plane host, where verify --pods runs kubectl")?;
    let transparent = l.inv.cluster.windows_profile() == Some(WindowsProfile::Transparent);
    // every node with a block (outside --limit too: their pods are the
    // selected ones' targets)
    let alloc = ran
        .allocation
        .as_ref()
        .ok_or("the pod CIDR allocation could not be made: see the hosts' errors")?;
    let subjects: Vec<crate::podcheck::Subject> = alloc
        .assignments
        .iter()
        .filter(|a| l.inv.host(&a.host).is_some())
        .map(|a| crate::podcheck::Subject {
            host: a.host.clone(),
            node: l
                .inv
                .host(&a.host)
                .map_or_else(|| a.host.to_ascii_lowercase(), |h| h.node_name()),
            os: a.os,
            address: a.address,
            pod_cidr: a.pod_cidr,
            host_dns: a.os == Os::Windows && transparent,
        })
        .collect();
    let pc = &l.inv.cluster.pod_check;
    let options = crate::podcheck::Options {
        namespace: pc.namespace.clone(),
        images: pc.images.clone(),
        domain: l.inv.cluster.dns_domain.clone(),
        start_timeout: pc.start_timeout,
        call_timeout: connect.connect_timeout,
    };
    let mut session = transport::connect(cp, transport::Interpreter::Sh, connect)
        .await
        .map_err(|e| format!("{}: {e}", cp.name))?;
    // 32 random bits (hex) name this run's pods and label them
    let id = crate::lock::run_id("p");
    let run = id[id.len() - 8..].to_string();
    let stop = || interrupt.is_set();
    let say = |s: &str| reporter.say(s);
    let r = crate::podcheck::check(&mut *session, &subjects, &options, &run, &stop, &say).await;
    session.close().await;
    r
}
