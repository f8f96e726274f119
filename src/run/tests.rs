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
use crate::os::NodeOps;
use crate::os::windows::{WinAction, WindowsFacts, WindowsOps};
use crate::outcome::{ActionStatus, HostStatus};
use crate::report::Format;
use crate::transport::Output;

const INVENTORY: &str = "\
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
  - name: w1
    os: windows
    address: 198.18.1.4
";

/// A Linux host as far as kwinctl's scripts can tell.
#[derive(Default)]
struct LinuxHost {
    pod_cidr: Option<String>,
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
            if line.starts_with("printf '%s\\n' ") && line.ends_with("/etc/kwinctl/pod-cidr.tmp") {
                self.pod_cidr = Some(quoted(line)[1].to_string());
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
            } else if line.ends_with("/etc/kwinctl/boot.sh.sha256.tmp") {
                self.boot_sha = Some(quoted(line)[1].to_string());
            } else if line.starts_with("rm -f /etc/kwinctl/boot.sh") {
                self.boot_sha = None;
                self.pod_cidr = None;
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
        if !failed && script.contains("printf 'KWF probe linux 2\\n'") {
            out += &self.facts(script);
        }
        Output {
            stdout: out,
            stderr: String::new(),
            exit: Some(0),
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
             KWF boot_sha {}\nKWF systemd false\nKWF routes {}\n",
            u8::from(self.forwarding),
            self.pod_cidr.as_deref().unwrap_or(""),
            self.boot_sha.as_deref().unwrap_or(""),
            serde_json::Value::from(routes)
        );
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

type Answer = Arc<Mutex<dyn FnMut(&str) -> Output + Send>>;

#[derive(Clone, Default)]
struct Fakes {
    hosts: Arc<Mutex<BTreeMap<String, Answer>>>,
    /// (host, script) of every call, in order.
    calls: Arc<Mutex<Vec<(String, String)>>>,
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
    fn calls_to(&self, name: &str) -> usize {
        self.calls
            .lock()
            .unwrap()
            .iter()
            .filter(|(h, _)| h == name)
            .count()
    }
}

struct FakeSession {
    host: String,
    answer: Answer,
    calls: Arc<Mutex<Vec<(String, String)>>>,
}

impl Session for FakeSession {
    fn run<'a>(&'a mut self, script: &'a str) -> BoxFuture<'a, Result<Output, TransportError>> {
        self.calls
            .lock()
            .unwrap()
            .push((self.host.clone(), script.to_string()));
        let out = (self.answer.lock().unwrap())(script);
        async move { Ok(out) }.boxed()
    }
    fn close(self: Box<Self>) -> BoxFuture<'static, ()> {
        async {}.boxed()
    }
}

impl Connector for Fakes {
    fn connect<'a>(
        &'a self,
        host: &'a Host,
        _: Interpreter,
    ) -> BoxFuture<'a, Result<Box<dyn Session>, TransportError>> {
        let answer = self.hosts.lock().unwrap().get(&host.name).cloned();
        let calls = self.calls.clone();
        async move {
            match answer {
                Some(answer) => Ok(Box::new(FakeSession {
                    host: host.name.clone(),
                    answer,
                    calls,
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

fn inventory() -> Inventory {
    Inventory::parse(std::path::Path::new("t.yaml"), INVENTORY).unwrap()
}

fn targets(inv: &Inventory, only: &[&str]) -> Vec<Target> {
    let alloc = crate::alloc::allocate(inv, &Default::default()).unwrap();
    let nodes = crate::alloc::nodes(inv, &alloc);
    let r = crate::os::renderer();
    inv.hosts
        .iter()
        .zip(nodes)
        .filter(|(h, _)| only.contains(&h.name.as_str()))
        .map(|(h, n)| Target {
            host: h.clone(),
            desired: Desired::of(inv, h, &n, &r, &Default::default()).unwrap(),
            node: n,
            route: None,
        })
        .collect()
}

/// Run `mode` on those hosts of the test inventory against the fakes.
fn run(
    mode: Mode,
    only: &[&str],
    fakes: &Fakes,
    interrupt: Interrupt,
) -> (Vec<HostReport>, Events) {
    let events = Events::default();
    let inv = inventory();
    let targets = targets(&inv, only);
    let reporter = Arc::new(Reporter::with_events(
        Format::Json,
        mode,
        targets.len(),
        false,
        Box::new(events.clone()),
    ));
    let opts = RunOptions {
        parallel: 8,
        reach: ReachMode::Auto,
        timeout: Duration::from_secs(5),
        retries: 0,
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let reports = rt.block_on(run_all(
        mode,
        targets,
        opts,
        Arc::new(fakes.clone()),
        reporter,
        interrupt,
        None,
    ));
    (reports, events)
}

fn linux_pair(fakes: &Fakes) -> (Arc<Mutex<LinuxHost>>, Arc<Mutex<LinuxHost>>) {
    let a = Arc::new(Mutex::new(LinuxHost::default()));
    let b = Arc::new(Mutex::new(LinuxHost::default()));
    fakes.linux("cp", a.clone());
    fakes.linux("l2", b.clone());
    (a, b)
}

#[test]
fn up_converges_and_a_converged_host_costs_one_call() {
    let fakes = Fakes::default();
    let (cp, _) = linux_pair(&fakes);
    let (r, _) = run(Mode::Up, &["cp", "l2"], &fakes, Interrupt::default());
    for h in &r {
        assert_eq!(h.status, HostStatus::Changed, "{h:?}");
        // record, forwarding, 2 routes (w1's and the other Linux host's), boot.sh
        assert_eq!(h.count(ActionStatus::Changed), 5, "{h:?}");
    }
    assert_eq!(fakes.calls_to("cp"), 2, "probe, then apply + re-probe");
    assert_eq!(cp.lock().unwrap().routes.len(), 2);

    let (r, _) = run(Mode::Up, &["cp", "l2"], &fakes, Interrupt::default());
    for h in &r {
        assert_eq!(h.status, HostStatus::Ok, "{h:?}");
        assert_eq!(h.count(ActionStatus::Changed), 0);
    }
    assert_eq!(fakes.calls_to("cp"), 3, "a converged host is one call");
}

#[test]
fn plan_lists_and_changes_nothing() {
    let fakes = Fakes::default();
    let (cp, _) = linux_pair(&fakes);
    let (r, _) = run(Mode::Plan, &["cp"], &fakes, Interrupt::default());
    assert_eq!(r[0].status, HostStatus::Pending);
    assert_eq!(r[0].count(ActionStatus::Planned), 5);
    assert_eq!(fakes.calls_to("cp"), 1);
    assert!(cp.lock().unwrap().routes.is_empty());
}

#[test]
fn a_failing_action_stops_the_host_and_names_the_action() {
    let fakes = Fakes::default();
    let (cp, l2) = linux_pair(&fakes);
    cp.lock().unwrap().fail_on = Some("ip_forward".into());
    let (r, _) = run(Mode::Up, &["cp", "l2"], &fakes, Interrupt::default());
    let e = r[0].error.as_ref().unwrap().to_string();
    assert!(
        e.starts_with("action 2 failed (enable IPv4 forwarding); the 3 actions after it"),
        "{e}"
    );
    assert_eq!(r[0].count(ActionStatus::Failed), 1);
    assert_eq!(r[0].count(ActionStatus::Skipped), 3);
    assert!(cp.lock().unwrap().routes.is_empty());
    // the other host is not held back
    assert_eq!(r[1].status, HostStatus::Changed);
    assert_eq!(l2.lock().unwrap().routes.len(), 2);
}

#[test]
fn verify_fails_a_host_that_cannot_reach_a_peer_and_changes_nothing() {
    let fakes = Fakes::default();
    let (cp, _) = linux_pair(&fakes);
    run(Mode::Up, &["cp", "l2"], &fakes, Interrupt::default());
    cp.lock().unwrap().unreachable = vec!["198.18.1.3".into()];
    let before = fakes.calls_to("cp");
    let (r, _) = run(Mode::Verify, &["cp", "l2"], &fakes, Interrupt::default());
    assert_eq!(r[0].status, HostStatus::Failed);
    let failed: Vec<&str> = r[0].failed_checks().map(|c| c.name.as_str()).collect();
    assert_eq!(failed, ["reach l2 198.18.1.3"]);
    assert_eq!(r[1].status, HostStatus::Ok);
    assert_eq!(fakes.calls_to("cp"), before + 1);
}

#[test]
fn reset_removes_what_up_made_and_confirms_it() {
    let fakes = Fakes::default();
    let (cp, _) = linux_pair(&fakes);
    run(Mode::Up, &["cp"], &fakes, Interrupt::default());
    let (r, _) = run(Mode::Reset, &["cp"], &fakes, Interrupt::default());
    assert_eq!(r[0].status, HostStatus::Changed, "{r:?}");
    let h = cp.lock().unwrap();
    assert!(h.routes.is_empty() && h.pod_cidr.is_none() && h.boot_sha.is_none());
    drop(h);
    let (r, _) = run(Mode::Reset, &["cp"], &fakes, Interrupt::default());
    assert_eq!(r[0].status, HostStatus::Ok);
}

#[test]
fn an_interrupted_run_starts_no_host() {
    let fakes = Fakes::default();
    linux_pair(&fakes);
    let irq = Interrupt::default();
    irq.set(143);
    let (r, _) = run(Mode::Up, &["cp", "l2"], &fakes, irq.clone());
    assert!(r.iter().all(|h| h.status == HostStatus::Interrupted));
    assert_eq!(fakes.calls.lock().unwrap().len(), 0);
    assert_eq!(irq.exit_code(), Some(143));
}

#[test]
fn a_panicking_host_task_fails_that_host_alone() {
    let fakes = Fakes::default();
    let (_, l2) = linux_pair(&fakes);
    fakes.answer("cp", |_| panic!("bug"));
    let (r, _) = run(Mode::Up, &["cp", "l2"], &fakes, Interrupt::default());
    assert_eq!(r[0].status, HostStatus::Failed);
    assert!(matches!(r[0].error, Some(HostError::Internal(_))), "{r:?}");
    assert_eq!(r[1].status, HostStatus::Changed);
    assert_eq!(l2.lock().unwrap().routes.len(), 2);
}

/// Facts of `w1` once every action `up` would take has been taken.
fn converged_windows() -> WindowsFacts {
    let inv = inventory();
    let t = targets(&inv, &["w1"]).remove(0);
    let Desired::Windows(d) = &t.desired else {
        unreachable!()
    };
    let r = crate::os::renderer();
    let ops = WindowsOps::new(&r, &t.node, d);
    let mut f = ops.fresh();
    f.docker_version = "17.06.2-ee-16".into();
    for a in ops.diff(&f).unwrap().actions() {
        match a {
            WinAction::RecordPodCidr { pod_cidr } => f.pod_cidr = Some(*pod_cidr),
            WinAction::EnableRouting => {
                f.routing_installed = true;
                f.adapters.iter_mut().for_each(|a| a.forwarding = true);
            }
            WinAction::CreateSwitch => f.switches.push(crate::os::windows::facts::Switch {
                name: crate::os::windows::KUBE_PROXY_SWITCH.into(),
                kind: "Internal".into(),
            }),
            WinAction::CreateNetwork {
                name,
                subnet,
                gateway,
                ..
            } => f.networks.push(crate::os::windows::facts::Network {
                name: name.clone(),
                driver: "transparent".into(),
                subnet: Some(*subnet),
                gateway: Some(*gateway),
            }),
            WinAction::SetGatewayAddress { gateway, .. } => {
                f.adapters.push(crate::os::windows::facts::Adapter {
                    name: crate::os::windows::HNS_ADAPTER.into(),
                    index: 9,
                    ipv4: vec![*gateway],
                    forwarding: true,
                })
            }
            WinAction::AddRoute { dst, via, .. } => {
                f.routes.push(crate::os::windows::facts::WinRoute {
                    dst: *dst,
                    via: Some(*via),
                    index: 4,
                    persistent: true,
                })
            }
            WinAction::PullImage { image } => f.images.push(image.clone()),
            WinAction::InstallService { service, .. } => {
                f.services.push(crate::os::windows::facts::Service {
                    name: service.name.clone(),
                    status: "Running".into(),
                    start: "Automatic".into(),
                    binpath: service.binpath.clone(),
                    env: service.env.clone(),
                    depends: service.depends.clone(),
                    restart: true,
                })
            }
            other => panic!("not modelled: {other:?}"),
        }
    }
    assert_eq!(ops.diff(&f).unwrap().changes(), 0);
    f
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
        }
    }
}

#[test]
fn a_windows_hosts_event_agrees_with_the_summary() {
    let fakes = Fakes::default();
    let (cp, l2) = linux_pair(&fakes);
    fakes.answer("w1", windows_host(converged_windows()));
    run(Mode::Up, &["cp", "l2"], &fakes, Interrupt::default());
    // The control plane's kubectl sees w1 (by its address), but not Ready.
    cp.lock().unwrap().kubectl = Some(vec![
        "cp True linux".into(),
        "198.18.1.4 False windows".into(),
    ]);
    let _ = l2;
    let (r, events) = run(
        Mode::Verify,
        &["cp", "l2", "w1"],
        &fakes,
        Interrupt::default(),
    );
    let w1 = &r[2];
    assert_eq!(w1.status, HostStatus::Failed, "{w1:?}");
    let failed: Vec<String> = w1.failed_checks().map(|c| c.detail.clone()).collect();
    assert_eq!(failed, ["node 198.18.1.4 is not Ready"]);
    let hosts: Vec<serde_json::Value> = events
        .lines()
        .into_iter()
        .filter(|e| e["event"] == "host")
        .collect();
    assert_eq!(hosts.len(), 3);
    for e in &hosts {
        let name = e["report"]["host"].as_str().unwrap();
        let summary = r.iter().find(|h| h.host == name).unwrap();
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
    // and when the node is Ready, w1 passes
    cp.lock().unwrap().kubectl = Some(vec!["198.18.1.4 True windows".into()]);
    let (r, _) = run(Mode::Verify, &["cp", "w1"], &fakes, Interrupt::default());
    assert_eq!(r[1].status, HostStatus::Ok, "{:?}", r[1]);
}
