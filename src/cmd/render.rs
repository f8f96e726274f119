//! `kwinctl render`: the script each host would get on a freshly installed
//! machine. Contacts nothing.

use std::io::Write;

use super::{Common, load, selected};
use crate::error::{CliError, Exit};
use crate::os::fresh_script;

pub fn render(c: &Common, only: Option<&str>) -> Result<Exit, CliError> {
    let l = load(c)?;
    // the script uploads the kubeconfig: its secrets are masked here too
    super::register_secrets(&l.inv);
    let limit: Vec<String> = only
        .map(|h| vec![h.to_string()])
        .unwrap_or_else(|| c.limit.clone());
    let r = crate::os::renderer();
    // written whole at the end, which says whether it arrived
    let mut out = Vec::new();
    for (h, node) in selected(&l, &limit)? {
        let _ = writeln!(
            out,
            "# ===== {} ({}, {}, pod CIDR {}) =====",
            h.name, h.os, h.address, node.pod_cidr
        );
        let script = fresh_script(&r, &l.inv, h, node)?;
        let _ = write!(out, "{}", crate::secret::redact(&script));
        let _ = writeln!(out);
    }
    super::emit(&out)?;
    Ok(Exit::Ok)
}
