//! kubectl on the control plane, over its session: every script kwinctl
//! runs there as cluster admin (join's bootstrap tokens and kube-proxy's
//! Secrets, the upgrade's cordon, drain and uncordon, `verify --pods`)
//! first finds kubectl, and runs bounded with its output made printable.

use std::time::Duration;

use crate::text::printable_lines;
use crate::transport::Session;

/// The line each control-plane script starts with: exit 127, saying so,
/// when kubectl is not on the PATH.
pub const FOUND: &str =
    "command -v kubectl >/dev/null 2>&1 || { echo 'kubectl is not on the PATH' >&2; exit 127; }\n";

/// `body` on the control plane after [`FOUND`], bounded by `bound` (and
/// 15 s more for the session itself): (exit code, stdout, stderr), the
/// texts made printable line by line.
pub async fn run(
    s: &mut dyn Session,
    body: &str,
    bound: Duration,
) -> Result<(u32, String, String), String> {
    let full = format!("{FOUND}{body}");
    match tokio::time::timeout(bound + Duration::from_secs(15), s.run(&full)).await {
        Ok(Ok(o)) => Ok((
            o.exit.unwrap_or(255),
            printable_lines(&o.stdout),
            printable_lines(&o.stderr),
        )),
        Ok(Err(e)) => Err(format!("the control plane did not answer: {e}")),
        Err(_) => Err(format!(
            "the control plane did not answer within {}s",
            bound.as_secs().max(1)
        )),
    }
}
