//! kubectl on the control plane, over its session: every script kwinctl
//! runs there as cluster admin (join's bootstrap tokens and kube-proxy's
//! Secrets, the upgrade's cordon, drain and uncordon, `verify --pods`)
//! first finds kubectl, and runs bounded with its output made printable.

use std::time::Duration;

use crate::render::sh_quote;
use crate::text::{last_line, printable_lines};
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

/// `kubectl delete secret NAME -n NAMESPACE` on the control plane, bounded
/// by `bound`. A Secret already gone is not an error; `Err` says why for
/// the caller's message (kubectl's exit code and last line, or that the
/// control plane did not answer).
pub async fn delete_secret(
    s: &mut dyn Session,
    name: &str,
    namespace: &str,
    bound: Duration,
) -> Result<(), String> {
    let script = format!(
        "timeout {} kubectl delete secret {} -n {}\n",
        bound.as_secs().max(1),
        sh_quote(name),
        sh_quote(namespace)
    );
    let (rc, _, err) = run(s, &script, bound).await?;
    if rc == 0 || err.contains("(NotFound)") {
        return Ok(());
    }
    Err(format!("kubectl exit {rc}: {}", last_line(&err)))
}
