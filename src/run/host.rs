//! One host: connect, run the command's flow with this host's [`NodeOps`],
//! close.

use futures::future::BoxFuture;

use super::{Ctx, Target, step};
use crate::alloc::Node;
use crate::mode::Mode;
use crate::os::{NodeOps, WithOps, interpreter};
use crate::outcome::{HostError, HostReport};
use crate::transport::Session;

pub(super) async fn run(ctx: &Ctx, t: &Target) -> HostReport {
    let r = t.blank();
    ctx.reporter.phase(&t.host.name, "connecting");
    let mut session = match step::connect(ctx, &t.host, interpreter(t.host.os)).await {
        Ok(s) => s,
        Err(e) => return r.failed(HostError::Connect(e)),
    };
    let flow = Flow {
        ctx,
        session: &mut session,
        node: &t.node,
        r,
    };
    let report = t.desired.ops(&ctx.renderer, &t.host, &t.node, flow).await;
    session.close().await;
    report
}

/// The command's flow, for whichever OS the host runs.
struct Flow<'a> {
    ctx: &'a Ctx,
    session: &'a mut Box<dyn Session>,
    node: &'a Node,
    r: HostReport,
}

impl<'a> WithOps<'a> for Flow<'a> {
    type Out = BoxFuture<'a, HostReport>;
    fn with<O: NodeOps + 'a>(self, ops: O) -> Self::Out {
        let Flow {
            ctx,
            session,
            node,
            r,
        } = self;
        Box::pin(async move {
            match ctx.mode {
                Mode::Plan => super::plan::plan(ctx, session, node, &ops, r).await,
                Mode::Verify => super::verify::verify(ctx, session, node, &ops, r).await,
                Mode::Up => super::converge::converge(ctx, session, node, &ops, r).await,
                Mode::Reset => super::reset::reset(ctx, session, node, &ops, r).await,
            }
        })
    }
}
