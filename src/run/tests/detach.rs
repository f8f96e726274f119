//! The runner with an action run detached from the connection (`run/detach.rs`),
//! against a fake l2bridge host whose pod network is missing: the start
//! script, then the result script until the result comes, then the rest.

use super::*;

/// A fake l2bridge host: converged once its result was read; `lose`: the
/// result never comes (the task hangs). Answers every script by its
/// headers, as winsim does.
fn detaching_host(lose: bool) -> impl FnMut(&str) -> Output + Send {
    let converged = crate::os::windows::fixtures::l2bridge_converged();
    let mut fresh = converged.clone();
    fresh.hns_networks.clear();
    let mut done = false;
    move |script: &str| {
        let headers: Vec<serde_json::Value> = script
            .lines()
            .filter_map(|l| l.strip_prefix(crate::wire::SIM_HEADER))
            .filter_map(|j| serde_json::from_str(j).ok())
            .collect();
        let mut out = String::new();
        for h in &headers {
            let token = h["token"].as_str().unwrap_or_default();
            match h["kind"].as_str().unwrap_or_default() {
                "detach_start" => out += &format!("KWD {token} started\n"),
                "detach_result" if lose => out += &format!("KWD {token} pending\n"),
                "detach_result" => {
                    done = true;
                    out += "KWX 0 ok\nKWD end\n";
                }
                "probe" => {
                    let facts = if done { &converged } else { &fresh };
                    let probe =
                        windows_host(facts.clone())(&format!("{}{h}\n", crate::wire::SIM_HEADER));
                    out += &probe.stdout;
                }
                _ => {
                    if let Some(id) = h["id"].as_u64() {
                        out += &format!("KWX {id} ok\n");
                    }
                }
            }
        }
        Output {
            stdout: out,
            stderr: String::new(),
            exit: Some(0),
            dropped: 0,
        }
    }
}

fn scripts_to(fakes: &Fakes, host: &str) -> Vec<String> {
    fakes
        .calls
        .lock()
        .unwrap()
        .iter()
        .filter(|(h, _)| h == host)
        .map(|(_, s)| s.clone())
        .collect()
}

fn kind_of_script(s: &str) -> String {
    s.lines()
        .filter_map(|l| l.strip_prefix(crate::wire::SIM_HEADER))
        .filter_map(|j| serde_json::from_str::<serde_json::Value>(j).ok())
        .map(|v| v["kind"].as_str().unwrap_or_default().to_string())
        .find(|k| k != "prelude")
        .unwrap_or_default()
}

#[test]
fn the_network_is_created_detached_and_up_goes_on_with_its_result() {
    let fakes = Fakes::default();
    let op = Operator::new(&l2bridge_inventory());
    linux_hosts(&fakes, &["lin01"]);
    fakes.answer("win01", detaching_host(false));
    let (ran, _) = op.run(Mode::Up, &[], &fakes, Opts::default());
    let r = report(&ran, "win01");
    assert_eq!(r.status, HostStatus::Changed, "{r:?}");
    let net = r
        .actions
        .iter()
        .find(|a| a.action.contains("HNS L2Bridge network"))
        .expect("the network's action");
    assert_eq!(net.status, ActionStatus::Changed, "{r:?}");
    // the network went alone, detached: started, then its result read;
    // no apply script carries it
    let kinds: Vec<String> = scripts_to(&fakes, "win01")
        .iter()
        .map(|s| kind_of_script(s))
        .collect();
    let start = kinds.iter().position(|k| k == "detach_start").unwrap();
    assert_eq!(kinds[start + 1], "detach_result", "{kinds:?}");
    assert!(
        !kinds.contains(&"ensure_hns_network".to_string()),
        "{kinds:?}"
    );
}

/// The poll that reads the result was let in just before the host's
/// network dropped (the vSwitch blip): the connection it came over is
/// gone from its next call on. The rest of the run goes over a new one.
#[test]
fn after_the_result_the_run_goes_on_over_a_new_connection() {
    let fakes = Fakes::default();
    let op = Operator::new(&l2bridge_inventory());
    linux_hosts(&fakes, &["lin01"]);
    fakes.answer("win01", detaching_host(false));
    fakes
        .blip_after_result
        .lock()
        .unwrap()
        .insert("win01".into(), (0, 0));
    let (ran, _) = op.run(Mode::Up, &[], &fakes, Opts::default());
    let r = report(&ran, "win01");
    assert_eq!(r.status, HostStatus::Changed, "{r:?}");
    let (opened, cut) = fakes.blip_after_result.lock().unwrap()["win01"];
    assert!(cut >= 1 && opened > cut, "opened {opened}, cut {cut}");
}

#[test]
fn a_result_that_never_comes_fails_the_host_after_the_bound() {
    let fakes = Fakes::default();
    let op = Operator::new(&l2bridge_inventory());
    linux_hosts(&fakes, &["lin01"]);
    fakes.answer("win01", detaching_host(true));
    let opts = Opts {
        detach_wait: Some(Duration::from_secs(5)),
        ..Opts::default()
    };
    let (ran, _) = op.run(Mode::Up, &[], &fakes, opts);
    let r = report(&ran, "win01");
    assert_eq!(r.status, HostStatus::Failed, "{r:?}");
    let e = r.error.as_ref().map(|e| e.to_string()).unwrap_or_default();
    for part in [
        "no result from win01 within --detach-wait 5s",
        "its task is still running",
        r"\kwinctl\kwinctl-detached",
        "run `kwinctl up` again: it resumes",
    ] {
        assert!(e.contains(part), "no {part:?} in: {e}");
    }
    // nothing after it ran
    let after: Vec<_> = r
        .actions
        .iter()
        .skip_while(|a| !a.action.contains("HNS L2Bridge network"))
        .skip(1)
        .filter(|a| a.status != ActionStatus::Ok)
        .collect();
    assert!(
        !after.is_empty() && after.iter().all(|a| a.status == ActionStatus::Skipped),
        "{r:?}"
    );
}
