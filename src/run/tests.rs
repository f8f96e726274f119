//! Size: two fake hosts (Linux, Windows) and the runner's scenarios on them;
//! the fakes are only worth having together with the tests that use them.
//!
//! The runner without root: fake sessions answer the real scripts. A fake
//! Linux host reads the actions a script carries (the same lines a shell
//! would run) and keeps its routes, forwarding and files; a fake Windows
//! host answers its probe with facts the test gives it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use futures::FutureExt;
use futures::future::BoxFuture;

use super::*;
use crate::inventory::Inventory;
use crate::os::windows::WindowsFacts;
use crate::outcome::{ActionStatus, HostError, HostStatus};
use crate::report::Format;
use crate::state::State;
use crate::transport::Output;

mod detach;

/// A Linux host as far as kwinctl's scripts can tell.
#[derive(Default)]
struct LinuxHost {
    pod_cidr: Option<String>,
    /// "name id"
    cluster: Option<String>,
    /// The lock host it records (the cluster file's second line).
    lock_host: Option<String>,
    /// The cluster lock's run id and generation, on the lock host.
    lock: Option<String>,
    generation: u64,
    /// The cluster's registry lines (on the lock host).
    registry: Vec<String>,
    forwarding: bool,
    /// dst → via, kwinctl's (proto 198).
    routes: BTreeMap<String, String>,
    boot_sha: Option<String>,
    /// Addresses that do not answer pings.
    unreachable: Vec<String>,
    /// `kubectl get nodes` lines (name, Ready, os), when it has kubectl.
    kubectl: Option<Vec<String>>,
    /// An action whose line makes it fail (a substring of its body).
    fail_on: Option<String>,
}

fn quoted(s: &str) -> Vec<&str> {
    s.split('\'').skip(1).step_by(2).collect()
}

impl LinuxHost {
    /// What `sh -s` would print for `script`.
    fn run(&mut self, script: &str) -> Output {
        let mut out = String::new();
        let mut id: Option<usize> = None;
        let mut failed = false;
        for line in script.lines() {
            if failed {
                break;
            }
            if let Some(rest) = line.strip_prefix("kw_action_")
                && let Some(n) = rest.strip_suffix("() (")
            {
                id = n.parse().ok();
            }
            if let Some(f) = &self.fail_on
                && line.contains(f.as_str())
                && let Some(i) = id
            {
                out += &format!("KWX {i} failed 1\nKWE fake failure\n");
                failed = true;
                continue;
            }
            if line.ends_with("/etc/kwinctl/.pod-cidr.$$") {
                self.pod_cidr = Some(quoted(line)[1].to_string());
            } else if line.ends_with("/etc/kwinctl/.cluster.$$") {
                let q = quoted(line);
                self.cluster = Some(format!("{} {}", q[1], q[2]));
                self.lock_host = Some(q[3].to_string());
            } else if line == "echo 1 > /proc/sys/net/ipv4/ip_forward" {
                self.forwarding = true;
            } else if line.starts_with("ip -4 route replace ") {
                let q = quoted(line);
                self.routes.insert(q[0].into(), q[1].into());
            } else if let Some(r) = line.strip_prefix("route replace ") {
                let f: Vec<&str> = r.split(' ').collect();
                self.routes.insert(f[0].into(), f[2].into());
            } else if line.starts_with("  ip -4 route del ") {
                self.routes.remove(quoted(line)[0]);
            } else if line.ends_with("/etc/kwinctl/.boot.sh.sha256.$$") {
                self.boot_sha = Some(quoted(line)[1].to_string());
            } else if line.starts_with("rm -f /etc/kwinctl/boot.sh") {
                self.boot_sha = None;
                self.pod_cidr = None;
                self.cluster = None;
                self.lock_host = None;
            } else if let Some(rest) = line.strip_prefix("kw_run ") {
                out += &format!("KWX {} ok\n", rest.split(' ').next().unwrap());
            } else if let Some(rest) = line.strip_prefix("kw_run_batch ") {
                let f: Vec<usize> = rest
                    .split(' ')
                    .take(2)
                    .map(|n| n.parse().unwrap())
                    .collect();
                for i in f[0]..=f[1] {
                    out += &format!("KWX {i} ok\n");
                }
            }
        }
        if let Some(l) = script
            .lines()
            .find(|l| l.starts_with("# kwinctl: take the cluster lock for run "))
        {
            let run = l.trim_start_matches("# kwinctl: take the cluster lock for run ");
            let run = run.split(':').next().unwrap().to_string();
            let want: u64 = script
                .lines()
                .find_map(|l| l.strip_prefix("  if [ \"${kw_gen:-0}\" != '"))
                .and_then(|r| r.split('\'').next())
                .and_then(|g| g.parse().ok())
                .unwrap();
            out += &match &self.lock {
                Some(other) => format!("KWL held 1799\nKWL owner someone else (run {other})\n"),
                None if want != self.generation => format!("KWL changed {}\n", self.generation),
                None => {
                    self.lock = Some(run);
                    // taking the lock counts one change
                    self.generation += 1;
                    self.registry = registry_of(script);
                    "KWL taken\n".to_string()
                }
            };
        }
        if let Some(l) = script
            .lines()
            .find_map(|l| l.strip_prefix("# kwinctl: renew the lease of run "))
        {
            let run = l.split("'s cluster lock").next().unwrap();
            out += if self.lock.as_deref() == Some(run) {
                "KWL renewed\n"
            } else {
                "KWL lost\n"
            };
        }
        if script.contains("# kwinctl: release the cluster lock") {
            self.lock = None;
            self.generation += 1;
            self.registry = registry_of(script);
            out += "KWL released\n";
        }
        if !failed && script.contains("printf 'KWF probe linux 2\\n'") {
            out += &self.facts(script);
        }
        Output {
            stdout: out,
            stderr: String::new(),
            exit: Some(0),
            dropped: 0,
        }
    }

    fn facts(&self, script: &str) -> String {
        let routes: Vec<serde_json::Value> = self
            .routes
            .iter()
            .map(|(d, v)| serde_json::json!({"dst": d, "gateway": v, "dev": "eth0", "protocol": "198"}))
            .collect();
        let mut s = format!(
            "KWF probe linux 2\nKWF hostname fake\nKWF ip_forward {}\nKWF pod_cidr {}\n\
             KWF cluster {}\nKWF lock_host {}\nKWF cluster_gen {}\nKWF boot_sha {}\nKWF systemd false\n\
             KWF routes {}\n",
            u8::from(self.forwarding),
            self.pod_cidr.as_deref().unwrap_or(""),
            self.cluster.as_deref().unwrap_or(""),
            self.lock_host.as_deref().unwrap_or(""),
            self.generation,
            self.boot_sha.as_deref().unwrap_or(""),
            serde_json::Value::from(routes)
        );
        for l in &self.registry {
            s += &format!("KWF registered {l}\n");
        }
        for line in script.lines().filter(|l| l.contains("ping -n -q")) {
            let ip = quoted(line)[0];
            let ok = !self.unreachable.iter().any(|u| u == ip);
            s += &format!("KWF reach {ip} {}\n", if ok { "ok" } else { "fail" });
        }
        if script.contains("kubectl get nodes")
            && let Some(nodes) = &self.kubectl
        {
            s += "KWF nodes listed\n";
            for n in nodes {
                s += &format!("KWF node {n}\n");
            }
        }
        s + "KWF end\n"
    }
}

/// The registry lines a lock or unlock script writes.
/// What a renewal script says first.
const RENEW: &str = "# kwinctl: renew the lease of run ";

fn registry_of(script: &str) -> Vec<String> {
    script
        .split("kw_put /etc/kwinctl/cluster.blocks '")
        .nth(1)
        .and_then(|rest| rest.split('\'').next())
        .map(|b| b.lines().map(str::to_string).collect())
        .unwrap_or_default()
}

type Answer = Arc<Mutex<dyn FnMut(&str) -> Output + Send>>;

#[derive(Clone, Default)]
struct Fakes {
    hosts: Arc<Mutex<BTreeMap<String, Answer>>>,
    /// (host, script) of every call, in order.
    calls: Arc<Mutex<Vec<(String, String)>>>,
    /// Hosts whose connection never completes (a SYN nobody answers).
    hanging: Arc<Mutex<Vec<String>>>,
    /// Hosts whose apply calls take this long.
    slow: Arc<Mutex<BTreeMap<String, Duration>>>,
    /// What happened on each host's channels, in order: `side <first line
    /// of the script>` for a side channel's calls, `apply begins` and
    /// `apply ends` for a slow host's apply calls.
    log: Arc<Mutex<Vec<(String, String)>>>,
    /// Hosts whose network drops just after a detached action's result
    /// was read: the sessions opened until then fail from their next call
    /// on. Per host: connections opened, and how many of them are cut.
    blip_after_result: Arc<Mutex<BTreeMap<String, (usize, usize)>>>,
}

impl Fakes {
    fn linux(&self, name: &str, h: Arc<Mutex<LinuxHost>>) {
        let answer: Answer = Arc::new(Mutex::new(move |s: &str| h.lock().unwrap().run(s)));
        self.hosts.lock().unwrap().insert(name.into(), answer);
    }
    fn answer(&self, name: &str, f: impl FnMut(&str) -> Output + Send + 'static) {
        self.hosts
            .lock()
            .unwrap()
            .insert(name.into(), Arc::new(Mutex::new(f)));
    }
    /// The calls to `name`, less the lease's renewals (their number
    /// depends on how long the run takes: [`Fakes::renewals_to`]).
    fn calls_to(&self, name: &str) -> usize {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .filter(|(h, s)| h == name && !s.contains(RENEW))
            .count()
    }

    /// The lease's renewals sent to `name`.
    fn renewals_to(&self, name: &str) -> usize {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .filter(|(h, s)| h == name && s.contains(RENEW))
            .count()
    }
}

#[derive(Clone)]
struct FakeSession {
    host: String,
    answer: Answer,
    calls: Arc<Mutex<Vec<(String, String)>>>,
    fakes: Fakes,
    /// A side channel ([`Session::side`]).
    side: bool,
    /// This host's connection number (from 1), for `blip_after_result`.
    opened: usize,
}

impl FakeSession {
    fn log(&self, what: String) {
        self.fakes
            .log
            .lock()
            .unwrap()
            .push((self.host.clone(), what));
    }
}

impl Session for FakeSession {
    fn run<'a>(&'a mut self, script: &'a str) -> BoxFuture<'a, Result<Output, TransportError>> {
        self.calls
            .lock()
            .unwrap()
            .push((self.host.clone(), script.to_string()));
        let cut = {
            let blips = self.fakes.blip_after_result.lock().unwrap();
            blips.get(&self.host).is_some_and(|b| self.opened <= b.1)
        };
        if cut {
            let host = self.host.clone();
            return async move {
                Err(TransportError::Lost {
                    host,
                    msg: "connection closed before message completed".into(),
                })
            }
            .boxed();
        }
        let out = (self.answer.lock().unwrap())(script);
        if script.contains("\"kind\":\"detach_result\"") && out.stdout.contains("KWD end") {
            let mut blips = self.fakes.blip_after_result.lock().unwrap();
            if let Some(b) = blips.get_mut(&self.host) {
                b.1 = b.0;
            }
        }
        let slow = self.fakes.slow.lock().unwrap().get(&self.host).copied();
        if self.side {
            self.log(format!(
                "side {}",
                script.lines().next().unwrap_or_default()
            ));
        }
        let apply = !self.side && script.contains("\nkw_action_");
        async move {
            if let (Some(d), true) = (slow, apply) {
                self.log("apply begins".into());
                tokio::time::sleep(d).await;
                self.log("apply ends".into());
            }
            Ok(out)
        }
        .boxed()
    }
    fn close(self: Box<Self>) -> BoxFuture<'static, ()> {
        async {}.boxed()
    }
    fn last_call_next(&mut self) {
        self.log("last call next".into());
    }
    fn side(&self) -> Option<Box<dyn Session>> {
        Some(Box::new(FakeSession {
            side: true,
            ..self.clone()
        }))
    }
}

impl Connector for Fakes {
    fn connect<'a>(
        &'a self,
        host: &'a Host,
        _: Interpreter,
        _: &'a crate::transport::Trace,
    ) -> BoxFuture<'a, Result<Box<dyn Session>, TransportError>> {
        let answer = self.hosts.lock().unwrap().get(&host.name).cloned();
        let calls = self.calls.clone();
        let hangs = self.hanging.lock().unwrap().contains(&host.name);
        let fakes = self.clone();
        async move {
            if hangs {
                futures::future::pending::<()>().await;
            }
            let opened = {
                let mut blips = fakes.blip_after_result.lock().unwrap();
                match blips.get_mut(&host.name) {
                    Some(b) => {
                        b.0 += 1;
                        b.0
                    }
                    None => 0,
                }
            };
            match answer {
                Some(answer) => Ok(Box::new(FakeSession {
                    host: host.name.clone(),
                    answer,
                    calls,
                    fakes,
                    side: false,
                    opened,
                }) as Box<dyn Session>),
                None => Err(TransportError::Connect {
                    addr: host.address.to_string(),
                    msg: "connection refused".into(),
                }),
            }
        }
        .boxed()
    }
}

/// A buffer the reporter's JSON events go to.
#[derive(Clone, Default)]
struct Events(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Events {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Events {
    fn lines(&self) -> Vec<serde_json::Value> {
        String::from_utf8_lossy(&self.0.lock().unwrap())
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    }
}

/// An operator's machine: an inventory and the state file beside it.
struct Operator {
    dir: tempfile::TempDir,
    inventory: String,
}

impl Operator {
    fn new(inventory: &str) -> Operator {
        Operator {
            dir: tempfile::tempdir().unwrap(),
            inventory: inventory.to_string(),
        }
    }

    fn inv(&self) -> Inventory {
        Inventory::parse(&self.dir.path().join("t.yaml"), &self.inventory).unwrap()
    }

    fn state_path(&self) -> std::path::PathBuf {
        self.dir.path().join("t.kwinctl-state.json")
    }

    fn state(&self) -> State {
        State::load(&self.state_path(), &self.inv().cluster.name).unwrap()
    }

    /// Run `mode` with these hosts selected (all when empty) against the
    /// fakes, as the CLI would.
    fn run(&self, mode: Mode, only: &[&str], fakes: &Fakes, opts: Opts) -> (Ran, Events) {
        let events = Events::default();
        let inv = self.inv();
        let targets: Vec<Target> = inv
            .hosts
            .iter()
            .map(|h| Target {
                host: h.clone(),
                desired: Desired::of(&inv, h, &Default::default()).unwrap(),
                selected: only.is_empty() || only.contains(&h.name.as_str()),
                removed: false,
                route: None,
            })
            .collect();
        let selected = targets.iter().filter(|t| t.selected).count();
        let reporter = Arc::new(Reporter::with_events(
            Format::Json,
            mode,
            selected,
            false,
            Box::new(events.clone()),
        ));
        let cluster = Cluster {
            state: self.state(),
            inventory: Arc::new(inv),
            state_path: self.state_path(),
            owner: "tester".into(),
            run_id: format!("run-{}", fakes.calls.lock().unwrap().len()),
        };
        let run_opts = RunOptions {
            parallel: opts.parallel.unwrap_or(8),
            reach: ReachMode::Auto,
            timeout: Duration::from_secs(5),
            retries: 0,
            with_peer_routes: opts.with_peer_routes,
            reboot: false,
            allow_downgrade: false,
            accept_ca: None,
            upgrade_parallel: 1,
            upgrade_pods: false,
            max_fail: opts.max_fail,
            lease: opts
                .lease
                .unwrap_or(Duration::from_secs(crate::os::lock_lease())),
            detach_wait: opts.detach_wait.unwrap_or(Duration::from_secs(30)),
        };
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let ran = rt.block_on(run_all(
            mode,
            cluster,
            targets,
            run_opts,
            Io {
                connector: Arc::new(fakes.clone()),
                reporter,
                interrupt: opts.interrupt,
                record: None,
            },
        ));
        (ran, events)
    }
}

#[derive(Default)]
struct Opts {
    interrupt: Interrupt,
    with_peer_routes: bool,
    parallel: Option<usize>,
    max_fail: Option<usize>,
    /// The cluster lock's lease (default: `KWINCTL_LOCK_LEASE`'s).
    lease: Option<Duration>,
    /// `--detach-wait` (default 30 s).
    detach_wait: Option<Duration>,
}

const LINUX_ONLY: &str = "\
cluster:
  name: t
  cluster_cidr: 198.19.0.0/16
  service_cidr: 198.18.240.0/20
  api_server: https://198.18.1.2:6443
hosts:
  - name: cp
    os: linux
    role: control-plane
    address: 198.18.1.2
  - name: l2
    os: linux
    address: 198.18.1.3
";

fn linux_hosts(fakes: &Fakes, names: &[&str]) -> Vec<Arc<Mutex<LinuxHost>>> {
    names
        .iter()
        .map(|n| {
            let h = Arc::new(Mutex::new(LinuxHost::default()));
            fakes.linux(n, h.clone());
            h
        })
        .collect()
}

fn status(ran: &Ran, host: &str) -> HostStatus {
    ran.reports
        .iter()
        .find(|r| r.host == host)
        .unwrap_or_else(|| panic!("{host} not reported: {:?}", ran.reports))
        .status
}

fn report<'r>(ran: &'r Ran, host: &str) -> &'r HostReport {
    ran.reports
        .iter()
        .find(|r| r.host == host)
        .unwrap_or_else(|| panic!("{host} not reported"))
}

/// The lock host converges like any other host while the run holds the
/// cluster lock: the lease is taken, renewed and released on its side
/// channel, beside the host's own calls, and its session is never handed
/// over.
#[test]
fn the_lock_host_converges_while_its_side_channel_keeps_the_lease() {
    let fakes = Fakes::default();
    let op = Operator::new(LINUX_ONLY);
    let h = linux_hosts(&fakes, &["cp", "l2"]);
    // cp's apply outlasts three renewals (a lease of 300 ms: one each 100 ms)
    fakes
        .slow
        .lock()
        .unwrap()
        .insert("cp".into(), Duration::from_millis(450));
    let opts = Opts {
        lease: Some(Duration::from_millis(300)),
        ..Opts::default()
    };
    let (ran, events) = op.run(Mode::Up, &[], &fakes, opts);
    assert_eq!(status(&ran, "cp"), HostStatus::Changed, "{:?}", ran.reports);
    assert_eq!(status(&ran, "l2"), HostStatus::Changed, "{:?}", ran.reports);
    assert_eq!(h[0].lock().unwrap().routes.len(), 1, "cp converged");
    assert!(h[0].lock().unwrap().lock.is_none(), "the lock is released");
    let log: Vec<String> = fakes
        .log
        .lock()
        .unwrap()
        .iter()
        .filter(|(host, _)| host == "cp")
        .map(|(_, what)| what.clone())
        .collect();
    let side: Vec<&String> = log.iter().filter(|w| w.starts_with("side ")).collect();
    assert!(
        side.first()
            .unwrap()
            .starts_with("side # kwinctl: take the cluster lock"),
        "{log:?}"
    );
    assert!(
        side.last()
            .unwrap()
            .starts_with("side # kwinctl: release the cluster lock"),
        "{log:?}"
    );
    let begins = log.iter().position(|w| w == "apply begins").unwrap();
    let ends = log.iter().position(|w| w == "apply ends").unwrap();
    let renewals_during_apply = log[begins..ends]
        .iter()
        .filter(|w| w.starts_with("side # kwinctl: renew the lease"))
        .count();
    assert!(renewals_during_apply >= 2, "{log:?}");
    // the lease was never lost, and cp's own calls were its own
    let said = serde_json::to_string(&events.lines()).unwrap();
    assert!(!said.contains("lost the cluster lock"), "{said}");
    let side_calls = side
        .iter()
        .filter(|w| !w.starts_with("side # kwinctl: renew the lease"))
        .count();
    let on_main = fakes.calls_to("cp") - side_calls;
    assert_eq!(on_main, 2, "probe, then apply + re-probe: {log:?}");
}

/// A run whose lock is broken after it took it (`kwinctl unlock` of a live
/// run) starts no host: the lock host says so when the run confirms its
/// lease before the first host starts. The run says it lost the lock.
#[test]
fn a_run_whose_lock_was_broken_starts_no_host() {
    let fakes = Fakes::default();
    let op = Operator::new(LINUX_ONLY);
    let h = linux_hosts(&fakes, &["cp", "l2"]);
    let cp = h[0].clone();
    fakes.answer("cp", move |s: &str| {
        let mut cp = cp.lock().unwrap();
        let o = cp.run(s);
        if s.contains("# kwinctl: take the cluster lock for run ") {
            cp.lock = Some("another run".into());
        }
        o
    });
    let (ran, _) = op.run(Mode::Up, &[], &fakes, Opts::default());
    for r in &ran.reports {
        assert_eq!(r.status, HostStatus::Failed, "{r:?}");
        assert!(matches!(r.error, Some(HostError::Refused(_))), "{r:?}");
        assert_eq!(r.count(ActionStatus::Changed), 0, "{r:?}");
    }
    assert!(h[0].lock().unwrap().routes.is_empty());
    assert!(h[1].lock().unwrap().routes.is_empty());
    let lost = ran.lost.expect("the run says it lost the lock");
    assert!(lost.contains("lost the cluster lock on cp"), "{lost}");
}

#[test]
fn up_converges_and_a_converged_host_costs_one_call() {
    let fakes = Fakes::default();
    let op = Operator::new(LINUX_ONLY);
    let h = linux_hosts(&fakes, &["cp", "l2"]);
    let (ran, _) = op.run(Mode::Up, &[], &fakes, Opts::default());
    for r in &ran.reports {
        assert_eq!(r.status, HostStatus::Changed, "{r:?}");
        // record, forwarding, the route to the other host, boot.sh
        assert_eq!(r.count(ActionStatus::Changed), 4, "{r:?}");
    }
    // the lock host: probe, take the lock, apply + re-probe, release it;
    // the lease renewed before any host changed
    assert_eq!(fakes.calls_to("cp"), 4);
    assert!(fakes.renewals_to("cp") >= 1);
    assert_eq!(fakes.calls_to("l2"), 2, "probe, then apply + re-probe");
    assert_eq!(h[0].lock().unwrap().routes.len(), 1);
    assert!(h[0].lock().unwrap().lock.is_none(), "the lock is released");
    // taking the lock and releasing it count one each
    assert_eq!(h[0].lock().unwrap().generation, 2);
    // the state file records what the nodes now record, and their cluster
    let state = op.state();
    assert_eq!(state.pod_cidrs.len(), 2);
    let id = state.cluster_id.clone().unwrap();
    assert_eq!(
        h[1].lock().unwrap().cluster.as_deref(),
        Some(&*format!("t {id}"))
    );

    let (ran, _) = op.run(Mode::Up, &[], &fakes, Opts::default());
    for r in &ran.reports {
        assert_eq!(r.status, HostStatus::Ok, "{r:?}");
        assert_eq!(r.count(ActionStatus::Changed), 0);
    }
    assert_eq!(
        fakes.calls_to("cp"),
        5,
        "a converged host is one call, and no lock"
    );
    assert_eq!(fakes.calls_to("l2"), 3);
}

/// verify's probe is its only call: the session is told so (over SSH no
/// channel is then opened ahead for a next call); `up`, which may call
/// again after its probe, never says it.
#[test]
fn verify_says_its_probe_is_the_last_call_and_up_does_not() {
    let fakes = Fakes::default();
    let op = Operator::new(LINUX_ONLY);
    let h = linux_hosts(&fakes, &["cp", "l2"]);
    let told = |fakes: &Fakes| -> Vec<String> {
        let log = fakes.log.lock().unwrap();
        let mut v: Vec<String> = log
            .iter()
            .filter(|(_, w)| w == "last call next")
            .map(|(h, _)| h.clone())
            .collect();
        v.sort();
        v
    };
    let (ran, _) = op.run(Mode::Up, &[], &fakes, Opts::default());
    assert!(ran.reports.iter().all(|r| r.status == HostStatus::Changed));
    assert!(told(&fakes).is_empty(), "{:?}", told(&fakes));
    let before = (fakes.calls_to("cp"), fakes.calls_to("l2"));
    let (ran, _) = op.run(Mode::Verify, &[], &fakes, Opts::default());
    for r in &ran.reports {
        assert_eq!(r.status, HostStatus::Ok, "{r:?}");
    }
    assert_eq!(told(&fakes), ["cp", "l2"]);
    // and it was: one call each
    assert_eq!(
        (fakes.calls_to("cp"), fakes.calls_to("l2")),
        (before.0 + 1, before.1 + 1)
    );
    drop(h);
}

#[test]
fn a_host_printing_more_than_kwinctl_reads_is_told_so() {
    let fakes = Fakes::default();
    let op = Operator::new(LINUX_ONLY);
    let h = linux_hosts(&fakes, &["cp"]);
    fakes.answer("l2", |_| Output {
        stdout: "KWF probe linux 2\n".into(),
        stderr: String::new(),
        exit: Some(0),
        dropped: 1 << 20,
    });
    let (ran, _) = op.run(Mode::Verify, &[], &fakes, Opts::default());
    let e = report(&ran, "l2").error.as_ref().unwrap().to_string();
    assert!(
        e.contains("more than kwinctl reads") && e.contains("1048576 more"),
        "{e}"
    );
    // nothing in what was read says it is the routing table
    assert!(!e.contains("routing table"), "{e}");
    drop(h);
}

#[test]
fn plan_lists_and_changes_nothing() {
    let fakes = Fakes::default();
    let op = Operator::new(LINUX_ONLY);
    let h = linux_hosts(&fakes, &["cp", "l2"]);
    let (ran, _) = op.run(Mode::Plan, &["cp"], &fakes, Opts::default());
    assert_eq!(ran.reports.len(), 2, "{:?}", ran.reports);
    assert_eq!(status(&ran, "cp"), HostStatus::Pending);
    assert_eq!(report(&ran, "cp").count(ActionStatus::Planned), 4);
    // l2 is outside --limit, and would need a route to cp: plan says so
    assert_eq!(status(&ran, "l2"), HostStatus::Pending);
    // the probe, then the read of the files it would rewrite (to show a
    // diff): nothing else
    assert_eq!(fakes.calls_to("cp"), 2);
    let calls = fakes.calls.lock().unwrap();
    let read = &calls.iter().rfind(|(h, _)| h == "cp").unwrap().1;
    assert!(read.contains("KWC") && !read.contains("kw_run"), "{read}");
    drop(calls);
    let files = &report(&ran, "cp").files;
    assert_eq!(
        files.len(),
        1,
        "boot.sh (the fake has no systemd): {files:?}"
    );
    assert!(files[0].diff.contains("would be created"), "{files:?}");
    assert!(h[0].lock().unwrap().routes.is_empty());
    assert!(!op.state_path().exists(), "plan records nothing");
}

#[test]
fn a_failing_action_stops_the_host_and_names_the_action() {
    let fakes = Fakes::default();
    let op = Operator::new(LINUX_ONLY);
    let h = linux_hosts(&fakes, &["cp", "l2"]);
    h[0].lock().unwrap().fail_on = Some("ip_forward".into());
    let (ran, _) = op.run(Mode::Up, &[], &fakes, Opts::default());
    let e = report(&ran, "cp").error.as_ref().unwrap().to_string();
    assert!(
        e.starts_with("action 2 failed (enable IPv4 forwarding); the 2 actions after it"),
        "{e}"
    );
    assert_eq!(report(&ran, "cp").count(ActionStatus::Failed), 1);
    assert_eq!(report(&ran, "cp").count(ActionStatus::Skipped), 2);
    assert!(h[0].lock().unwrap().routes.is_empty());
    // the other host is not held back
    assert_eq!(status(&ran, "l2"), HostStatus::Changed);
    assert_eq!(h[1].lock().unwrap().routes.len(), 1);
}

#[test]
fn verify_fails_a_host_that_cannot_reach_a_peer_and_changes_nothing() {
    let fakes = Fakes::default();
    let op = Operator::new(LINUX_ONLY);
    let h = linux_hosts(&fakes, &["cp", "l2"]);
    op.run(Mode::Up, &[], &fakes, Opts::default());
    h[0].lock().unwrap().unreachable = vec!["198.18.1.3".into()];
    let before = fakes.calls_to("cp");
    let (ran, _) = op.run(Mode::Verify, &[], &fakes, Opts::default());
    assert_eq!(status(&ran, "cp"), HostStatus::Failed);
    let failed: Vec<&str> = report(&ran, "cp")
        .failed_checks()
        .map(|c| c.name.as_str())
        .collect();
    assert_eq!(failed, ["reach l2 198.18.1.3"]);
    assert_eq!(status(&ran, "l2"), HostStatus::Ok);
    assert_eq!(fakes.calls_to("cp"), before + 1);
}

/// A host pings its peers right after its own changes, while they may
/// still be making theirs (a fresh Windows node opens its firewall only in
/// its own script): a peer that did not answer and was changing in this run
/// is pinged again once it is done — one more call, only then.
#[test]
fn a_peer_still_changing_is_pinged_again_when_it_is_done() {
    for stays_down in [false, true] {
        let fakes = Fakes::default();
        let op = Operator::new(LINUX_ONLY);
        let h = linux_hosts(&fakes, &["cp", "l2"]);
        // l2 answers cp's first two pings (its probe, its apply's re-probe)
        // with nothing, as a peer still opening its firewall would
        let cp = h[0].clone();
        let mut pinged = 0;
        fakes.answer("cp", move |s: &str| {
            let mut cp = cp.lock().unwrap();
            if s.contains("ping -n -q") {
                pinged += 1;
                cp.unreachable = if pinged <= 2 || stays_down {
                    vec!["198.18.1.3".into()]
                } else {
                    vec![]
                };
            }
            cp.run(s)
        });
        let (ran, _) = op.run(Mode::Up, &[], &fakes, Opts::default());
        let r = report(&ran, "cp");
        let failed: Vec<&str> = r.failed_checks().map(|c| c.name.as_str()).collect();
        if stays_down {
            assert_eq!(r.status, HostStatus::Failed, "{r:?}");
            assert_eq!(failed, ["reach l2 198.18.1.3"]);
        } else {
            assert_eq!(r.status, HostStatus::Changed, "{r:?}");
            assert!(failed.is_empty(), "{failed:?}");
        }
        // probe, lock, apply + re-probe, the second ping, release
        assert_eq!(fakes.calls_to("cp"), 5);
        assert_eq!(status(&ran, "l2"), HostStatus::Changed);
    }
}

#[test]
fn reset_removes_what_up_made_and_confirms_it() {
    let fakes = Fakes::default();
    let op = Operator::new(LINUX_ONLY);
    let h = linux_hosts(&fakes, &["cp", "l2"]);
    op.run(Mode::Up, &[], &fakes, Opts::default());
    let (ran, _) = op.run(Mode::Reset, &["l2"], &fakes, Opts::default());
    assert_eq!(ran.reports.len(), 1);
    assert_eq!(status(&ran, "l2"), HostStatus::Changed, "{:?}", ran.reports);
    let l2 = h[1].lock().unwrap();
    assert!(l2.routes.is_empty() && l2.pod_cidr.is_none() && l2.boot_sha.is_none());
    drop(l2);
    let (ran, _) = op.run(Mode::Reset, &["l2"], &fakes, Opts::default());
    assert_eq!(status(&ran, "l2"), HostStatus::Ok);
}

#[test]
fn an_interrupted_run_starts_no_host() {
    let fakes = Fakes::default();
    let op = Operator::new(LINUX_ONLY);
    linux_hosts(&fakes, &["cp", "l2"]);
    let irq = Interrupt::default();
    irq.set(143);
    let (ran, _) = op.run(
        Mode::Up,
        &[],
        &fakes,
        Opts {
            interrupt: irq.clone(),
            ..Opts::default()
        },
    );
    assert!(
        ran.reports
            .iter()
            .all(|h| h.status == HostStatus::Interrupted)
    );
    assert_eq!(fakes.calls.lock().unwrap().len(), 0);
    assert_eq!(irq.exit_code(), Some(143));
}

/// Ctrl-C while a connection hangs: the connecting host stops at once (it
/// was not changed), not at --timeout, and the run says it was interrupted.
#[test]
fn an_interrupt_ends_pending_connections_at_once() {
    let fakes = Fakes::default();
    let op = Operator::new(LINUX_ONLY);
    linux_hosts(&fakes, &["cp", "l2"]);
    fakes.hanging.lock().unwrap().push("l2".into());
    let irq = Interrupt::default();
    let later = irq.clone();
    let signal = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(200));
        later.set(130);
    });
    let start = std::time::Instant::now();
    let (ran, _) = op.run(
        Mode::Verify,
        &[],
        &fakes,
        Opts {
            interrupt: irq.clone(),
            ..Opts::default()
        },
    );
    signal.join().unwrap();
    // the fake run's --timeout is 5 s
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(
        status(&ran, "l2"),
        HostStatus::Interrupted,
        "{:?}",
        ran.reports
    );
    assert!(
        matches!(
            report(&ran, "l2").error,
            Some(HostError::Interrupted { probed: false })
        ),
        "{:?}",
        ran.reports
    );
    assert_eq!(irq.exit_code(), Some(130));
}

#[test]
fn a_panicking_host_task_fails_that_host_alone() {
    let fakes = Fakes::default();
    let op = Operator::new(LINUX_ONLY);
    let h = linux_hosts(&fakes, &["cp"]);
    let l2 = Arc::new(Mutex::new(LinuxHost::default()));
    let l2c = l2.clone();
    fakes.answer("l2", move |s: &str| {
        assert!(!s.contains("kw_action_"), "bug");
        l2c.lock().unwrap().run(s)
    });
    let (ran, _) = op.run(Mode::Up, &[], &fakes, Opts::default());
    assert_eq!(status(&ran, "l2"), HostStatus::Failed);
    assert!(
        matches!(report(&ran, "l2").error, Some(HostError::Internal(_))),
        "{:?}",
        ran.reports
    );
    assert_eq!(status(&ran, "cp"), HostStatus::Changed);
    assert_eq!(h[0].lock().unwrap().routes.len(), 1);
    assert!(h[0].lock().unwrap().lock.is_none(), "the lock is released");
}

const THREE: &str = "\
cluster:
  name: t
  cluster_cidr: 198.19.0.0/16
  service_cidr: 198.18.240.0/20
  api_server: https://198.18.1.2:6443
hosts:
  - name: cp
    os: linux
    role: control-plane
    address: 198.18.1.2
  - name: l2
    os: linux
    address: 198.18.1.3
  - name: l3
    os: linux
    address: 198.18.1.4
";

/// Each host's recorded block.
fn blocks(h: &[Arc<Mutex<LinuxHost>>]) -> Vec<Option<String>> {
    h.iter()
        .map(|h| h.lock().unwrap().pod_cidr.clone())
        .collect()
}

/// Each host's kwinctl routes.
fn routes(h: &[Arc<Mutex<LinuxHost>>]) -> Vec<BTreeMap<String, String>> {
    h.iter().map(|h| h.lock().unwrap().routes.clone()).collect()
}

#[test]
fn a_lost_state_file_and_a_new_order_change_nothing() {
    let fakes = Fakes::default();
    let op = Operator::new(THREE);
    let h = linux_hosts(&fakes, &["cp", "l2", "l3"]);
    op.run(Mode::Up, &[], &fakes, Opts::default());
    let (before_blocks, before_routes) = (blocks(&h), routes(&h));
    // a new laptop: no state file, and the hosts in another order
    std::fs::remove_file(op.state_path()).unwrap();
    let reordered = {
        let (head, hosts) = THREE.split_once("hosts:\n").unwrap();
        let parts: Vec<&str> = hosts.split("  - name:").filter(|p| !p.is_empty()).collect();
        format!(
            "{head}hosts:\n  - name:{}  - name:{}  - name:{}",
            parts[2], parts[0], parts[1]
        )
    };
    let op2 = Operator {
        dir: op.dir,
        inventory: reordered,
    };
    let (ran, _) = op2.run(Mode::Up, &[], &fakes, Opts::default());
    for r in &ran.reports {
        assert_eq!(r.status, HostStatus::Ok, "{r:?}");
    }
    assert_eq!(blocks(&h), before_blocks);
    assert_eq!(routes(&h), before_routes);
    // and the state file is what the nodes record
    let state = op2.state();
    for (name, b) in ["cp", "l2", "l3"].iter().zip(&before_blocks) {
        assert_eq!(state.pod_cidrs[*name].to_string(), *b.as_ref().unwrap());
    }
}

#[test]
fn two_nodes_recording_one_block_fail_and_nothing_depending_on_them_changes() {
    let fakes = Fakes::default();
    let op = Operator::new(THREE);
    let h = linux_hosts(&fakes, &["cp", "l2", "l3"]);
    op.run(Mode::Up, &[], &fakes, Opts::default());
    // l3 records l2's block (a botched manual copy)
    let l2_block = h[1].lock().unwrap().pod_cidr.clone();
    h[2].lock().unwrap().pod_cidr = l2_block.clone();
    let before = routes(&h);
    let (ran, _) = op.run(Mode::Up, &[], &fakes, Opts::default());
    assert_eq!(status(&ran, "l2"), HostStatus::Failed);
    assert_eq!(status(&ran, "l3"), HostStatus::Failed);
    let e = report(&ran, "l3").error.as_ref().unwrap().to_string();
    assert!(e.contains("l2 and l3 claim"), "{e}");
    // cp's routes to l2 and l3 are left as they were
    assert_eq!(
        status(&ran, "cp"),
        HostStatus::Ok,
        "{:?}",
        report(&ran, "cp")
    );
    assert_eq!(routes(&h), before);
}

#[test]
fn two_operators_never_hand_out_one_block() {
    let fakes = Fakes::default();
    let h = linux_hosts(&fakes, &["cp", "l2", "l3", "l4"]);
    let base = Operator::new(LINUX_ONLY);
    base.run(Mode::Up, &[], &fakes, Opts::default());
    let state = std::fs::read_to_string(base.state_path()).unwrap();
    // two copies of the inventory: A adds l3, B adds l4
    let add = |name: &str, ip: &str| {
        let op = Operator::new(&format!(
            "{LINUX_ONLY}  - name: {name}\n    os: linux\n    address: {ip}\n"
        ));
        std::fs::write(op.state_path(), &state).unwrap();
        op
    };
    let a = add("l3", "198.18.1.4");
    let b = add("l4", "198.18.1.5");
    let (ran, _) = a.run(Mode::Up, &[], &fakes, Opts::default());
    assert_eq!(status(&ran, "l3"), HostStatus::Changed);
    let (ran, _) = b.run(Mode::Up, &[], &fakes, Opts::default());
    assert_eq!(status(&ran, "l4"), HostStatus::Changed);
    let b3 = h[2].lock().unwrap().pod_cidr.clone().unwrap();
    let b4 = h[3].lock().unwrap().pod_cidr.clone().unwrap();
    assert_ne!(b3, b4, "one block handed out twice");
    // and neither operator's runs undo the other's routes
    let before = routes(&h);
    for op in [&a, &b, &a] {
        let (ran, _) = op.run(Mode::Up, &[], &fakes, Opts::default());
        assert!(
            ran.reports.iter().all(|r| r.status == HostStatus::Ok),
            "{:?}",
            ran.reports
        );
    }
    assert_eq!(routes(&h), before);
    assert_eq!(h[0].lock().unwrap().routes.get(&b3).unwrap(), "198.18.1.4");
    assert_eq!(h[0].lock().unwrap().routes.get(&b4).unwrap(), "198.18.1.5");
}

#[test]
fn a_held_cluster_lock_refuses_every_change() {
    let fakes = Fakes::default();
    let op = Operator::new(LINUX_ONLY);
    let h = linux_hosts(&fakes, &["cp", "l2"]);
    h[0].lock().unwrap().lock = Some("another-run".into());
    let (ran, _) = op.run(Mode::Up, &[], &fakes, Opts::default());
    assert!(ran.locked.is_some());
    for r in &ran.reports {
        let e = r.error.as_ref().unwrap().to_string();
        assert!(
            e.contains("the cluster lock on cp is held by another run"),
            "{e}"
        );
        assert!(e.contains("another-run"), "{e}");
    }
    assert!(routes(&h).iter().all(|r| r.is_empty()));
    assert!(blocks(&h).iter().all(|b| b.is_none()));
    assert_eq!(h[0].lock().unwrap().lock.as_deref(), Some("another-run"));
}

#[test]
fn a_run_whose_view_went_stale_changes_nothing() {
    let fakes = Fakes::default();
    let op = Operator::new(LINUX_ONLY);
    let h = linux_hosts(&fakes, &["cp", "l2"]);
    // another run finishes on cp between this run's probe and its lock
    let cp = h[0].clone();
    fakes.answer("cp", move |s: &str| {
        let mut host = cp.lock().unwrap();
        let out = host.run(s);
        if s.contains("printf 'KWF probe linux 2") && !s.contains("kw_action_") {
            host.generation += 1;
        }
        out
    });
    let (ran, _) = op.run(Mode::Up, &[], &fakes, Opts::default());
    assert!(ran.locked.is_some());
    let e = report(&ran, "l2").error.as_ref().unwrap().to_string();
    assert!(
        e.contains("took or released the cluster lock on cp since this one probed"),
        "{e}"
    );
    assert!(routes(&h).iter().all(|r| r.is_empty()));
}

#[test]
fn up_limited_to_a_new_host_never_leaves_peers_silently_behind() {
    let fakes = Fakes::default();
    let h = linux_hosts(&fakes, &["cp", "l2", "l3"]);
    let op = Operator::new(LINUX_ONLY);
    op.run(Mode::Up, &[], &fakes, Opts::default());
    let op = Operator {
        inventory: THREE.to_string(),
        dir: op.dir,
    };
    let (ran, _) = op.run(Mode::Up, &["l3"], &fakes, Opts::default());
    assert_eq!(status(&ran, "l3"), HostStatus::Changed);
    for peer in ["cp", "l2"] {
        assert_eq!(
            status(&ran, peer),
            HostStatus::Failed,
            "{:?}",
            report(&ran, peer)
        );
        let e = report(&ran, peer).error.as_ref().unwrap().to_string();
        assert!(
            e.contains("add route") && e.contains("--with-peer-routes"),
            "{e}"
        );
    }
    // with --with-peer-routes the others get just those routes
    let (ran, _) = op.run(
        Mode::Up,
        &["l3"],
        &fakes,
        Opts {
            with_peer_routes: true,
            ..Opts::default()
        },
    );
    assert_eq!(status(&ran, "cp"), HostStatus::Changed, "{:?}", ran.reports);
    assert_eq!(status(&ran, "l2"), HostStatus::Changed);
    let (ran, _) = op.run(Mode::Up, &[], &fakes, Opts::default());
    assert!(
        ran.reports.iter().all(|r| r.status == HostStatus::Ok),
        "{:?}",
        ran.reports
    );
    assert!(routes(&h).iter().all(|r| r.len() == 2));
}

#[test]
fn a_removed_host_keeps_its_block_until_reset_reaches_it() {
    let fakes = Fakes::default();
    let h = linux_hosts(&fakes, &["cp", "l2", "l3", "l4"]);
    let op = Operator::new(THREE);
    op.run(Mode::Up, &[], &fakes, Opts::default());
    let l3_block = h[2].lock().unwrap().pod_cidr.clone().unwrap();
    // l3 leaves the inventory: the others drop their routes to it, its
    // block is remembered
    let op = Operator {
        inventory: LINUX_ONLY.to_string(),
        dir: op.dir,
    };
    op.run(Mode::Up, &[], &fakes, Opts::default());
    assert!(!h[0].lock().unwrap().routes.contains_key(&l3_block));
    assert_eq!(op.state().removed["l3"].pod_cidr.to_string(), l3_block);
    // l4 joins: it does not get l3's block while l3 may still hold it
    let op = Operator {
        inventory: format!("{LINUX_ONLY}  - name: l4\n    os: linux\n    address: 198.18.1.5\n"),
        dir: op.dir,
    };
    op.run(Mode::Up, &[], &fakes, Opts::default());
    assert_ne!(h[3].lock().unwrap().pod_cidr.as_ref(), Some(&l3_block));
    assert!(op.state().removed.contains_key("l3"));
}

/// Answers a Windows probe with `facts`, every peer reachable.
fn windows_host(facts: WindowsFacts) -> impl FnMut(&str) -> Output + Send {
    move |script: &str| {
        let header = script
            .lines()
            .find_map(|l| l.strip_prefix(crate::wire::SIM_HEADER))
            .and_then(|j| serde_json::from_str::<serde_json::Value>(j).ok())
            .unwrap();
        let reach: Vec<String> = header["reach"]
            .as_array()
            .map(|a| {
                a.iter()
                    .map(|ip| format!("{} ok", ip.as_str().unwrap()))
                    .collect()
            })
            .unwrap_or_default();
        let mut v = serde_json::to_value(&facts).unwrap();
        v["v"] = 1.into();
        v["os"] = "windows".into();
        v["reach"] = reach.into();
        Output {
            stdout: format!("{}{v}\n", crate::wire::FACTS_MARKER),
            stderr: String::new(),
            exit: Some(0),
            dropped: 0,
        }
    }
}

/// tests/fixtures/windows/l2bridge.yaml, whose win01 converges to
/// l2bridge-converged.json (its kubeconfig by its full path: the operator's
/// inventory is in a temporary folder).
fn l2bridge_inventory() -> String {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/windows/");
    std::fs::read_to_string(format!("{dir}l2bridge.yaml"))
        .unwrap()
        .replace(
            "kubeconfig: cluster.kubeconfig",
            &format!("kubeconfig: {dir}cluster.kubeconfig"),
        )
}

#[test]
fn a_windows_hosts_event_agrees_with_the_summary() {
    let fakes = Fakes::default();
    let op = Operator::new(&l2bridge_inventory());
    let h = linux_hosts(&fakes, &["lin01"]);
    // (the cluster id it records is adopted: the state file has none yet)
    fakes.answer(
        "win01",
        windows_host(crate::os::windows::fixtures::l2bridge_converged()),
    );
    let (ran, _) = op.run(Mode::Up, &[], &fakes, Opts::default());
    assert_eq!(
        status(&ran, "win01"),
        HostStatus::Ok,
        "{:?}",
        report(&ran, "win01")
    );
    // The control plane's kubectl sees win01 (by its node name), but not Ready.
    h[0].lock().unwrap().kubectl = Some(vec![
        "lin01 True linux".into(),
        "win01 False windows".into(),
    ]);
    let (ran, events) = op.run(Mode::Verify, &[], &fakes, Opts::default());
    let win01 = report(&ran, "win01");
    assert_eq!(win01.status, HostStatus::Failed, "{win01:?}");
    let failed: Vec<String> = win01.failed_checks().map(|c| c.detail.clone()).collect();
    assert_eq!(failed, ["node win01 is not Ready"]);
    let hosts: Vec<serde_json::Value> = events
        .lines()
        .into_iter()
        .filter(|e| e["event"] == "host")
        .collect();
    assert_eq!(hosts.len(), 2);
    for e in &hosts {
        let name = e["report"]["host"].as_str().unwrap();
        let summary = report(&ran, name);
        assert_eq!(
            e["report"]["status"],
            summary.status.to_string(),
            "the event of {name} says {} but the summary {}",
            e["report"]["status"],
            summary.status
        );
        assert_eq!(
            e["report"]["checks"].as_array().unwrap().len(),
            summary.checks.len(),
            "{name}"
        );
    }
    // and when the node is Ready, win01 passes
    h[0].lock().unwrap().kubectl = Some(vec!["win01 True windows".into()]);
    let (ran, _) = op.run(Mode::Verify, &[], &fakes, Opts::default());
    assert_eq!(
        status(&ran, "win01"),
        HostStatus::Ok,
        "{:?}",
        report(&ran, "win01")
    );
}

/// Hosts whose order in the inventory is neither their names' nor their
/// addresses'.
const SHUFFLED: &str = "\
cluster:
  name: t
  cluster_cidr: 198.19.0.0/16
  service_cidr: 198.18.240.0/20
hosts:
  - { name: z, os: linux, address: 198.18.1.5 }
  - { name: cp, os: linux, role: control-plane, address: 198.18.1.2 }
  - { name: b, os: linux, address: 198.18.1.9 }
  - { name: a, os: linux, address: 198.18.1.3 }
";

/// The hosts that were sent changes, in the order they were.
fn applied(fakes: &Fakes) -> Vec<String> {
    fakes
        .calls
        .lock()
        .unwrap()
        .iter()
        // an apply script (the lock scripts use kw_run too)
        .filter(|(_, s)| s.contains("kw_run") && !s.contains("KWL"))
        .map(|(h, _)| h.clone())
        .collect()
}

#[test]
fn parallel_1_changes_the_hosts_one_by_one_in_inventory_order() {
    let fakes = Fakes::default();
    let op = Operator::new(SHUFFLED);
    linux_hosts(&fakes, &["z", "cp", "b", "a"]);
    let opts = Opts {
        parallel: Some(1),
        ..Opts::default()
    };
    let (ran, events) = op.run(Mode::Up, &[], &fakes, opts);
    assert!(
        ran.reports.iter().all(|r| r.status == HostStatus::Changed),
        "{:?}",
        ran.reports
    );
    assert_eq!(applied(&fakes), ["z", "cp", "b", "a"]);
    // probed in that order too, and announced in it
    let probed: Vec<String> = fakes
        .calls
        .lock()
        .unwrap()
        .iter()
        .take(4)
        .map(|(h, _)| h.clone())
        .collect();
    assert_eq!(probed, ["z", "cp", "b", "a"]);
    let announced: Vec<String> = events
        .lines()
        .iter()
        .filter(|e| e["event"] == "host")
        .map(|e| e["report"]["host"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(announced, ["z", "cp", "b", "a"]);
}

#[test]
fn max_fail_stops_starting_hosts_after_that_many_failures() {
    let fakes = Fakes::default();
    let op = Operator::new(SHUFFLED);
    let h = linux_hosts(&fakes, &["z", "cp", "b", "a"]);
    h[1].lock().unwrap().fail_on = Some("ip_forward".into());
    let opts = Opts {
        parallel: Some(1),
        max_fail: Some(1),
        ..Opts::default()
    };
    let (ran, _) = op.run(Mode::Up, &[], &fakes, opts);
    assert_eq!(status(&ran, "z"), HostStatus::Changed);
    assert_eq!(status(&ran, "cp"), HostStatus::Failed);
    for later in ["b", "a"] {
        let r = report(&ran, later);
        assert_eq!(r.status, HostStatus::Interrupted, "{r:?}");
        assert_eq!(
            r.error.as_ref().unwrap().to_string(),
            "not started: 1 host failed, and --max-fail stops at 1; nothing was changed on it"
        );
        assert!(r.count(ActionStatus::Skipped) > 0, "{r:?}");
    }
    // nothing was sent to the hosts after the failure
    assert_eq!(applied(&fakes), ["z", "cp"]);
    assert!(h[2].lock().unwrap().routes.is_empty());
    assert!(h[3].lock().unwrap().routes.is_empty());
}

#[test]
fn a_host_that_cannot_be_reached_counts_before_any_host_changes() {
    let fakes = Fakes::default();
    let op = Operator::new(SHUFFLED);
    let h = linux_hosts(&fakes, &["z", "cp", "b", "a"]);
    let (ran, _) = op.run(Mode::Up, &[], &fakes, Opts::default());
    assert!(ran.reports.iter().all(|r| r.status == HostStatus::Changed));
    // z and a drift; b stops answering
    h[0].lock().unwrap().routes.clear();
    h[3].lock().unwrap().routes.clear();
    fakes.hosts.lock().unwrap().remove("b");
    fakes.calls.lock().unwrap().clear();
    let opts = Opts {
        max_fail: Some(1),
        ..Opts::default()
    };
    let (ran, _) = op.run(Mode::Up, &[], &fakes, opts);
    assert_eq!(status(&ran, "b"), HostStatus::Failed);
    assert_eq!(status(&ran, "cp"), HostStatus::Ok);
    for h in ["z", "a"] {
        let r = report(&ran, h);
        assert_eq!(r.status, HostStatus::Interrupted, "{h}: {r:?}");
    }
    assert!(applied(&fakes).is_empty());
    // without --max-fail the others go on
    let (ran, _) = op.run(Mode::Up, &[], &fakes, Opts::default());
    assert_eq!(status(&ran, "z"), HostStatus::Changed);
}
