//! kubelet and kube-proxy (and containerd) as kwinctl runs them: a native
//! service, with kube-log-runner in front where the release writes no log
//! files, or (before `--windows-service`) a scheduled task.

use serde::Serialize;

use super::WIN_DIR;
use super::cmdline;
use super::k8s::Hosting;
use crate::hash::sha256_bytes;

/// kubelet or kube-proxy as kwinctl runs it: a native service, or (before
/// `--windows-service`) a scheduled task running a start script.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WinService {
    pub name: String,
    pub display: String,
    /// The binary (`C:\k\kubelet.exe`).
    pub exe: String,
    /// The full command line: the native service's ImagePath (with the
    /// log wrapper in front of the binary, if any).
    pub binpath: String,
    /// The command line after the binary (what the start script passes to
    /// `Start-Process -ArgumentList`, verbatim).
    pub args: String,
    pub env: Vec<String>,
    /// Services it needs running first (SCM dependencies; the start script
    /// waits for them).
    pub depends: Vec<String>,
    pub hosting: Hosting,
    /// The service's start mode: `Manual` (kwinctl's boot task starts it
    /// once the network is back) or `Automatic` (containerd). Left out of
    /// the serde form when Manual, so earlier fingerprints stay the same.
    #[serde(skip_serializing_if = "is_manual")]
    pub start_mode: String,
    /// kube-log-runner's arguments when it wraps the binary (the native
    /// service's ImagePath starts with the runner); left out of the serde
    /// form when there is none, as start_mode.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_runner: Option<Vec<String>>,
    /// The file the runner writes the binary's output to (where to look
    /// when it exits right after it started).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_file: Option<String>,
    /// A digest of everything above: a scheduled task carries it in its
    /// description, so a changed command line reinstalls the task.
    pub fingerprint: String,
}

fn is_manual(s: &str) -> bool {
    s == "Manual"
}

/// Bump when the start script's template changes, so existing tasks are
/// reinstalled with the new script.
const WRAPPER_VERSION: &str = "kwinctl-task-2";

impl WinService {
    /// A service of `name` running `exe` with `args` (quoted here).
    pub fn new(
        name: &str,
        display: &str,
        exe: String,
        args: &[String],
        env: Vec<String>,
        depends: Vec<String>,
        hosting: Hosting,
    ) -> WinService {
        let args = cmdline::join(args);
        let binpath = format!("{} {args}", cmdline::quote(&exe));
        let mut s = WinService {
            name: name.into(),
            display: display.into(),
            exe,
            binpath,
            args,
            env,
            depends,
            hosting,
            start_mode: "Manual".into(),
            log_runner: None,
            log_file: None,
            fingerprint: String::new(),
        };
        s.fingerprint = s.digest();
        s
    }

    /// The same service with kube-log-runner (`runner`, with `args`) in
    /// front of the binary: `runner args exe exe-args` (Go's flag package
    /// stops at the first argument that is not a flag); its log file is
    /// the `-log-file=` argument's.
    pub fn wrapped(mut self, runner: &str, args: Vec<String>) -> WinService {
        self.binpath = format!(
            "{} {} {}",
            cmdline::quote(runner),
            cmdline::join(&args),
            self.binpath
        );
        self.log_file = args
            .iter()
            .find_map(|a| a.strip_prefix("-log-file="))
            .map(str::to_string);
        self.log_runner = Some(args);
        self.fingerprint = self.digest();
        self
    }

    /// The same service, started by Windows at boot.
    pub fn automatic(mut self) -> WinService {
        self.start_mode = "Automatic".into();
        self.fingerprint = self.digest();
        self
    }

    /// The same service without the arguments `drop` says to leave out
    /// (the binary's own arguments; the log wrapper's stay).
    pub fn without_args(&self, drop: impl Fn(&str) -> bool) -> WinService {
        let args: Vec<String> = cmdline::split(&self.args)
            .into_iter()
            .filter(|a| !drop(a))
            .collect();
        let args = cmdline::join(&args);
        let head = self
            .binpath
            .strip_suffix(&self.args)
            .expect("a service's binpath ends with its arguments");
        let mut s = WinService {
            binpath: format!("{head}{args}"),
            args,
            ..self.clone()
        };
        s.fingerprint = s.digest();
        s
    }

    fn digest(&self) -> String {
        let s = WinService {
            fingerprint: String::new(),
            ..self.clone()
        };
        let digest = serde_json::to_vec(&(&s, WRAPPER_VERSION)).expect("service JSON");
        sha256_bytes(&digest)[..16].to_string()
    }

    /// What a kwinctl scheduled task's description says (the probe reads it
    /// back).
    pub fn task_description(&self) -> String {
        format!("{} [kwinctl {}]", self.display, self.fingerprint)
    }
}

/// A kubelet native service as kwinctl builds one (for the action examples
/// the grammar and snapshot tests render).
#[doc(hidden)]
pub fn example_service() -> WinService {
    WinService::new(
        "kubelet",
        "Kubernetes kubelet (kwinctl)",
        format!(r"{WIN_DIR}\kubelet.exe"),
        &[
            "--windows-service".into(),
            "--hostname-override=10.0.0.11".into(),
            "--resolv-conf=".into(),
            r"--log-dir=C:\k\logs".into(),
        ],
        vec!["CONTAINER_NETWORK=kwinctl".into()],
        vec!["docker".into()],
        Hosting::Service,
    )
}

/// A kubelet run by a scheduled task (a release before 1.10).
#[doc(hidden)]
pub fn example_task() -> WinService {
    WinService::new(
        "kubelet",
        "Kubernetes kubelet (kwinctl)",
        format!(r"{WIN_DIR}\kubelet.exe"),
        &[
            "--hostname-override=10.0.0.11".into(),
            "--pod-infra-container-image=apprenda/pause".into(),
            "--resolv-conf=".into(),
            r"--kubeconfig=C:\k\config".into(),
            "--require-kubeconfig".into(),
            "--odd=it's \"quoted\" $(x)".into(),
        ],
        vec!["CONTAINER_NETWORK=kwinctl".into()],
        vec!["docker".into()],
        Hosting::Task,
    )
}
