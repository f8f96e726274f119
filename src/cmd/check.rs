//! `kwinctl check`: validate the inventory and print the pod CIDR plan.
//! Contacts nothing, writes nothing.

use std::io::Write;

use super::{Common, load, selected};
use crate::alloc::Source;
use crate::error::{CliError, Exit};
use crate::events::{CheckSummary, ClusterView, Event, Line};
use crate::report::Format;
use crate::term::{Column, Grid, Style};

/// `strict`: what `plan` and `up` would refuse but an offline check can
/// leave to later (an unset WinRM password variable, an unreadable key
/// file) fails the check instead of being a warning.
pub fn check(c: &Common, strict: bool) -> Result<Exit, CliError> {
    let l = load(c)?;
    let chosen: Vec<&crate::inventory::Host> = selected(&l, &c.limit)?
        .into_iter()
        .map(|(h, _)| h)
        .collect();
    if let Err(e) = l.inv.check_credentials(&chosen) {
        if strict {
            return Err(e.into());
        }
        for p in e.to_string().lines() {
            crate::report::err_line(&if p.starts_with(' ') {
                p.to_string()
            } else {
                format!("warning: {p}")
            });
        }
        crate::report::err_line(
            "warning: `plan`, `up` and `verify` need these (exit 2 until they are set); \
             `kwinctl check --strict` fails on them",
        );
    }
    let cl = &l.inv.cluster;
    // written whole at the end, which says whether it arrived
    let mut out = Vec::new();
    if c.output == Format::Json {
        let notes = crate::os::inventory_notes(&l.inv);
        let line = Line::new(Event::CheckSummary(CheckSummary {
            command: "check",
            ok: true,
            cluster: ClusterView {
                name: cl.name.clone(),
                cluster_cidr: cl.cluster_cidr.to_string(),
                node_prefix: cl.node_prefix,
                service_cidr: cl.service_cidr.to_string(),
            },
            hosts: &l.alloc.assignments,
            notes: l
                .alloc
                .notes
                .iter()
                .chain(&notes)
                .map(String::as_str)
                .collect(),
        }));
        let _ = writeln!(out, "{}", crate::text::safe_json(&line.to_json()));
        super::emit(&out)?;
        return Ok(Exit::Ok);
    }
    let _ = writeln!(
        out,
        "{}: inventory OK — cluster {} ({} hosts), cluster CIDR {} (/{} per node), service CIDR {}",
        l.inv.path.display(),
        cl.name,
        l.inv.hosts.len(),
        cl.cluster_cidr,
        cl.node_prefix,
        cl.service_cidr
    );
    let mut g = Grid::new(&[
        Column::new("HOST"),
        Column::new("OS").optional(),
        Column::new("ROLE").optional(),
        Column::new("ROUTABLE IP").short("ADDRESS"),
        Column::new("POD CIDR"),
        Column::new("GATEWAY").optional(),
        Column::new("SOURCE"),
    ]);
    for (h, a) in l.inv.hosts.iter().zip(&l.alloc.assignments) {
        g.row(
            [
                h.name.clone(),
                h.os.to_string(),
                h.role.to_string(),
                h.address.to_string(),
                a.pod_cidr.to_string(),
                a.gateway.to_string(),
                a.source.to_string(),
            ]
            .into_iter()
            .map(|c| (c, None))
            .collect(),
        );
    }
    let _ = writeln!(out, "{}", g.render(Style::stdout()));
    for n in l
        .alloc
        .notes
        .iter()
        .chain(&crate::os::inventory_notes(&l.inv))
    {
        let _ = writeln!(out, "note: {n}");
    }
    if l.alloc.assignments.iter().any(|a| a.source == Source::New) {
        let _ = writeln!(
            out,
            "new assignments are recorded in {} by the next `kwinctl up`",
            l.sidecars.state.display()
        );
    }
    super::emit(&out)?;
    Ok(Exit::Ok)
}
