//! kube-log-runner, the wrapper that writes kubelet's and kube-proxy's
//! output to files where the release cannot (klog's file flags went in
//! 1.26): its rows in k8s.yaml (`component: kube-log-runner`).

use super::*;

/// The file `c`'s output goes to when kube-log-runner captures it.
fn log_file(c: Component, log_dir: &str) -> String {
    format!(r"{log_dir}\{}.log", c.name())
}

/// Whether release `m` of `c` can write its own log files: a klog file flag
/// (`--log-dir`) row of the profile holds in `m` (klog's file flags went in
/// 1.26, PR #112120).
fn klog_files(c: Component, m: Minor, p: Profile) -> bool {
    rows(c, p).any(|r| r.name == "--log-dir" && !r.env && r.exists_in(m))
}

/// Whether `c` of release `m` runs behind kube-log-runner: a native service
/// that cannot write its own log files.
pub fn wrapped(c: Component, m: Minor, p: Profile) -> bool {
    c != Component::LogRunner && hosting(c, m) == Hosting::Service && !klog_files(c, m, p)
}

/// kube-log-runner's arguments (before the program) when `c` of release `m`
/// is [`wrapped`]: its output, which the Service Control Manager drops,
/// goes to [`log_file`], rotating where the runner's release `runner` can
/// (the runner only starts the program and copies its output, so any
/// release of it wraps any kubelet). `None`: no wrapper.
pub fn log_runner(
    c: Component,
    m: Minor,
    runner: Minor,
    p: Profile,
    v: &Values,
) -> Option<Vec<String>> {
    if !wrapped(c, m, p) {
        return None;
    }
    let file = log_file(c, v.log_dir);
    let v = Values {
        log_file: &file,
        cluster_dns: "10.96.0.10",
        cluster_domain: "cluster.local",
        ..v.clone()
    };
    let args: Vec<String> = rows(Component::LogRunner, p)
        .filter(|r| {
            r.exists_in(runner)
                && !r.env
                && applies(
                    r.when,
                    v.kubeconfig.is_some(),
                    !v.taints.is_empty(),
                    Hosting::Service,
                    v.bootstrap,
                )
        })
        .map(|r| match &r.value {
            Some(t) => format!("{}={}", r.name, v.fill(t)),
            None => r.name.clone(),
        })
        .collect();
    // a runner before 1.23 does not exist: `check` refuses that release
    (!args.is_empty()).then_some(args)
}

/// Whether the runner of release `m` rotates the files it writes.
pub fn log_runner_rotates(m: Minor, p: Profile) -> bool {
    rows(Component::LogRunner, p).any(|r| r.name == "-log-file-size" && r.exists_in(m))
}
