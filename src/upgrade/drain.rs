//! The control plane's side of one node's upgrade, through its kubectl
//! (over the control plane's session, as `verify --pods` does): cordon and
//! drain before the node's binaries change (evictions, so
//! PodDisruptionBudgets hold; DaemonSet and mirror pods as `kubectl drain`
//! treats them; bounded), Ready at the new release after, uncordon last
//! (docs/research/upgrade.md#u2, #u5, #u6, #u9).

use std::collections::BTreeSet;
use std::time::Duration;

use crate::kubectl;
use crate::render::sh_quote;
use crate::text::last_line as said;
use crate::transport::Session;

/// How long a drain may take by default (`KWINCTL_DRAIN_TIMEOUT`).
pub const DRAIN_TIMEOUT: u64 = 300;

/// The drain's bound: `KWINCTL_DRAIN_TIMEOUT` seconds (1 to 86400), else
/// [`DRAIN_TIMEOUT`].
pub fn drain_timeout() -> Duration {
    Duration::from_secs(
        std::env::var("KWINCTL_DRAIN_TIMEOUT")
            .ok()
            .and_then(|v| v.trim().parse::<u64>().ok())
            .filter(|s| (1..=86400).contains(s))
            .unwrap_or(DRAIN_TIMEOUT),
    )
}

/// One kubectl script on the control plane, bounded by `bound` (and the
/// command's own `timeout`): (exit code, stdout, stderr), the texts made
/// printable.
async fn kubectl(
    s: &mut dyn Session,
    script: &str,
    bound: Duration,
) -> Result<(u32, String, String), String> {
    let secs = bound.as_secs().max(1);
    kubectl::run(s, &format!("timeout {secs} {script}\n"), bound).await
}

/// The pods a drain's output names as blocking it: refused evictions
/// (`error when evicting pods/"NAME" -n "NS"`) and the filters' refusals
/// (`cannot delete …: NS/NAME, NS/NAME`), as `NS/NAME`.
pub fn blocking_pods(err: &str) -> Vec<String> {
    let mut out = BTreeSet::new();
    for line in err.lines() {
        if let Some(rest) = line.split("error when evicting pods/\"").nth(1) {
            let name = rest.split('"').next().unwrap_or("");
            let ns = rest
                .split("-n \"")
                .nth(1)
                .and_then(|r| r.split('"').next())
                .unwrap_or("default");
            if !name.is_empty() {
                out.insert(format!("{ns}/{name}"));
            }
        }
        let l = line.trim_start_matches("error: ");
        if l.starts_with("cannot delete ")
            && let Some((_, pods)) = l.split_once("): ")
        {
            for p in pods.split(", ") {
                let p = p.trim();
                if p.contains('/') && !p.contains(' ') {
                    out.insert(p.to_string());
                }
            }
        }
    }
    out.into_iter().collect()
}

/// Where the control plane keeps the PID of a running drain of `node` of
/// the cluster `cluster` (its id: one control plane may hold several
/// clusters' kubeconfigs), for [`stop_drain`]. One file per node: the
/// cluster lock lets one run drain at a time, so a file left by a run that
/// died names its drain.
pub fn drain_pid_file(cluster: &str, node: &str) -> String {
    let hex: String = format!("{cluster}/{node}")
        .bytes()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("\"${{TMPDIR:-/tmp}}\"/kwinctl-drain.{hex}.pid")
}

/// The drain's script: `kubectl drain` in the background under its bound,
/// its PID in `pid_file` while it runs (so that another session can end
/// it: [`stop_drain`]; removed after, unless a later drain's PID replaced
/// it), its exit the script's.
fn drain_script(node: &str, secs: u64, pid_file: &str) -> String {
    format!(
        "f={pid_file}\n\
         timeout {} kubectl drain {} --ignore-daemonsets --delete-emptydir-data --timeout={secs}s </dev/null &\n\
         p=$!\n\
         echo \"$p\" > \"$f\"\n\
         wait \"$p\"\n\
         rc=$?\n\
         [ \"$(cat \"$f\" 2>/dev/null)\" = \"$p\" ] && rm -f \"$f\"\n\
         exit $rc\n",
        secs + 10,
        sh_quote(node)
    )
}

/// Cordon `node` and evict its pods (`kubectl drain`), within `timeout`,
/// its PID kept in `pid_file` while it runs. On failure: why, naming the
/// pods that blocked it.
pub async fn drain(
    s: &mut dyn Session,
    node: &str,
    timeout: Duration,
    pid_file: &str,
) -> Result<(), String> {
    let secs = timeout.as_secs().max(1);
    let script = drain_script(node, secs, pid_file);
    let (rc, _, err) = kubectl::run(s, &script, timeout + Duration::from_secs(10)).await?;
    if rc == 0 {
        return Ok(());
    }
    let pods = blocking_pods(&err);
    let why = if pods.is_empty() {
        format!("kubectl drain failed (exit {rc}): {}", said(&err))
    } else {
        format!(
            "the drain did not finish within {secs}s: {} blocked it ({}); make room for them (a \
             PodDisruptionBudget that allows one pod less, more replicas elsewhere) and run `up` \
             again, or raise KWINCTL_DRAIN_TIMEOUT",
            pods.join(", "),
            said(&err)
        )
    };
    Err(why)
}

/// End the drain whose PID is in `pid_file`, if it still runs (SIGTERM,
/// which `timeout` passes on to kubectl), and wait (bounded) until it is
/// gone: a run stopped during a drain leaves no eviction going on, and a
/// drain left by a run that died is ended before the next one starts. A
/// PID that is no longer a `kubectl drain` is left alone.
pub async fn stop_drain(
    s: &mut dyn Session,
    pid_file: &str,
    bound: Duration,
) -> Result<(), String> {
    let script = format!(
        "f={pid_file}\n\
         [ -f \"$f\" ] || exit 0\n\
         p=$(cat \"$f\")\n\
         case \"$p\" in ''|*[!0-9]*) rm -f \"$f\"; exit 0 ;; esac\n\
         tr '\\000' ' ' < /proc/\"$p\"/cmdline 2>/dev/null | grep -q 'kubectl drain' || {{ rm -f \"$f\"; exit 0; }}\n\
         kill -TERM \"$p\" 2>/dev/null\n\
         i=0\n\
         while kill -0 \"$p\" 2>/dev/null && [ $i -lt 50 ]; do sleep 0.1; i=$((i+1)); done\n\
         kill -0 \"$p\" 2>/dev/null && kill -KILL \"$p\" 2>/dev/null\n\
         rm -f \"$f\"\n\
         exit 0\n"
    );
    let (rc, _, err) = kubectl::run(s, &script, bound).await?;
    match rc {
        0 => Ok(()),
        _ => Err(format!(
            "ending the drain failed (exit {rc}): {}",
            said(&err)
        )),
    }
}

/// Mark `node` schedulable again.
pub async fn uncordon(s: &mut dyn Session, node: &str, bound: Duration) -> Result<(), String> {
    let (rc, _, err) = kubectl(s, &format!("kubectl uncordon {}", sh_quote(node)), bound).await?;
    if rc == 0 {
        Ok(())
    } else {
        Err(format!(
            "kubectl uncordon failed (exit {rc}): {}",
            said(&err)
        ))
    }
}

/// The annotation kwinctl puts on a node before it drains it for an
/// upgrade (its value: the release the node is upgraded to), removed when
/// it uncordons it: a cordoned node carrying it was cordoned by kwinctl, so
/// a later run may finish and uncordon it (docs/research/upgrade.md#u10).
pub const MARK: &str = "kwinctl.io/upgrade";

/// A node as kubectl lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    pub name: String,
    pub ready: bool,
    /// The kubelet's version (`v1.31.2`).
    pub version: String,
    pub cordoned: bool,
    /// kwinctl's [`MARK`]: cordoned by kwinctl for an upgrade.
    pub marked: bool,
}

/// The nodes as kubectl lists them.
pub async fn nodes(s: &mut dyn Session, bound: Duration) -> Result<Vec<Row>, String> {
    let mark = MARK.replace('.', "\\.");
    let script = format!(
        "kubectl get nodes --request-timeout=10s -o 'jsonpath={{range .items[*]}}{{.metadata.name}}{{\"|\"}}{{.status.conditions[?(@.type==\"Ready\")].status}}{{\"|\"}}{{.status.nodeInfo.kubeletVersion}}{{\"|\"}}{{.spec.unschedulable}}{{\"|\"}}{{.metadata.annotations.{mark}}}{{\"\\n\"}}{{end}}'"
    );
    let (rc, out, err) = kubectl(s, &script, bound).await?;
    if rc != 0 {
        return Err(format!(
            "kubectl get nodes failed (exit {rc}): {}",
            said(&err)
        ));
    }
    Ok(rows(&out))
}

fn rows(out: &str) -> Vec<Row> {
    out.lines()
        .filter_map(|l| {
            let f: Vec<&str> = l.split('|').collect();
            (f.len() == 5 && !f[0].is_empty()).then(|| Row {
                name: f[0].to_string(),
                ready: f[1] == "True",
                version: f[2].to_string(),
                cordoned: f[3] == "true",
                marked: !f[4].is_empty(),
            })
        })
        .collect()
}

/// Mark `node` as cordoned by kwinctl for an upgrade to `release`.
pub async fn mark(
    s: &mut dyn Session,
    node: &str,
    release: &str,
    bound: Duration,
) -> Result<(), String> {
    let script = format!(
        "kubectl annotate node {} --overwrite {}",
        sh_quote(node),
        sh_quote(&format!("{MARK}={release}"))
    );
    let (rc, _, err) = kubectl(s, &script, bound).await?;
    match rc {
        0 => Ok(()),
        _ => Err(format!(
            "kubectl annotate failed (exit {rc}): {}",
            said(&err)
        )),
    }
}

/// Uncordon `node` and remove kwinctl's [`MARK`] (in that order: a run
/// stopped between the two leaves a mark on a schedulable node, which the
/// next run removes).
pub async fn release(s: &mut dyn Session, node: &str, bound: Duration) -> Result<(), String> {
    uncordon(s, node, bound).await?;
    let script = format!(
        "kubectl annotate node {} {}",
        sh_quote(node),
        sh_quote(&format!("{MARK}-"))
    );
    let (rc, _, err) = kubectl(s, &script, bound).await?;
    match rc {
        0 => Ok(()),
        _ => Err(format!(
            "kubectl annotate (removing {MARK}) failed (exit {rc}): {}",
            said(&err)
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_pods_that_blocked_a_drain_are_named() {
        let err = "error when evicting pods/\"web-1\" -n \"shop\" (will retry after 5s): Cannot evict pod as it would violate the pod's disruption budget.\n\
                   error when evicting pods/\"web-1\" -n \"shop\" (will retry after 5s): Cannot evict pod as it would violate the pod's disruption budget.\n\
                   There are pending pods in node \"198.18.5.4\" when an error occurred: error when evicting pods/\"web-1\" -n \"shop\": global timeout reached: 10s\n\
                   pod/web-1\n\
                   error: unable to drain node \"198.18.5.4\" due to error: error when evicting pods/\"web-1\" -n \"shop\": global timeout reached: 10s, continuing command...";
        assert_eq!(blocking_pods(err), vec!["shop/web-1"]);
        let err = "error: unable to drain node \"n\" due to error: x, continuing command...\n\
                   There are pending nodes to be drained:\n n\n\
                   error: cannot delete Pods that declare no controller (use --force to override): default/bare, kube-system/x";
        assert_eq!(blocking_pods(err), vec!["default/bare", "kube-system/x"]);
        assert!(blocking_pods("error: the server is unreachable").is_empty());
    }

    #[test]
    fn the_drain_keeps_its_pid_where_stop_drain_finds_it() {
        let f = drain_pid_file("c", "win 1");
        let script = drain_script("win 1", 300, &f);
        assert!(script.starts_with(&format!("f={f}\n")), "{script}");
        assert!(
            script.contains(
                "timeout 310 kubectl drain 'win 1' --ignore-daemonsets --delete-emptydir-data --timeout=300s </dev/null &"
            ),
            "{script}"
        );
        assert!(
            script.contains("echo \"$p\" > \"$f\"\nwait \"$p\""),
            "{script}"
        );
        assert!(f.ends_with("/kwinctl-drain.632f77696e2031.pid"), "{f}");
    }

    #[test]
    fn a_node_row_says_whether_kwinctl_cordoned_it() {
        let r = rows("win1|True|v1.31.2|true|1.31.2\nwin2|False|v1.30.4||\n|x|y|z|w\nbad|line");
        assert_eq!(r.len(), 2);
        assert!(r[0].ready && r[0].cordoned && r[0].marked);
        assert_eq!(r[0].version, "v1.31.2");
        assert!(!r[1].ready && !r[1].cordoned && !r[1].marked);
    }
}
