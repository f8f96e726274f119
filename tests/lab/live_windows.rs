//! Live tests against real hosts, Windows Server included. Skipped unless
//! `KWINCTL_LIVE_INVENTORY` names an inventory (with its password variables
//! exported). They change those hosts: use a test cluster.
//!
//!   KWINCTL_LIVE_INVENTORY=./live.yaml KWINCTL_WINRM_PASSWORD=... \
//!     cargo test --ignore-rust-version --test lab -- live_windows:: --nocapture
//!
//! Any transport the inventory names works as it would for an operator:
//! for Windows hosts with `winrm.auth: kerberos` run `kinit` first (the
//! test inherits KRB5CCNAME and KRB5_CONFIG), for Windows hosts over SSH
//! have the key in ssh-agent or name it in the inventory.

use crate::common;

use common::{kwinctl, summary, text};

#[test]
fn live_up_verify_rerun() {
    let Ok(inv) = std::env::var("KWINCTL_LIVE_INVENTORY") else {
        eprintln!("live_windows: skipped (set KWINCTL_LIVE_INVENTORY to run it)");
        return;
    };
    let o = kwinctl(&["check", "-i", &inv]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = kwinctl(&["plan", "-i", &inv, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = kwinctl(&["up", "-i", &inv, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = kwinctl(&["verify", "-i", &inv]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    let o = kwinctl(&["up", "-i", &inv, "--output", "json"]);
    assert_eq!(o.status.code(), Some(0), "{}", text(&o));
    assert_eq!(summary(&o)["changed"], 0, "{}", text(&o));
}

/// A push to each Windows host, over the transport the inventory names: a
/// file holding every byte value (a NUL, a Ctrl-Z, lone CRs and LFs among
/// them) arrives whole through the receiving script's raw stdin, the host's
/// hash is right, and a second push sends nothing. What the lab's simulator
/// cannot show: that the real WinRS and powershell.exe hand the bytes over
/// unchanged (docs/research/push.md, "Raw bytes on a PowerShell's stdin").
/// Each run leaves its 3 MiB file in the hosts' push folder, which `reset`
/// removes.
#[test]
fn live_push_every_byte_value() {
    use kwinctl::inventory::{Inventory, Os};
    use kwinctl::transfer::{self, Local, Target};
    use kwinctl::transport::{self, ConfigSource, ConnectOptions, Interpreter};
    let Ok(inv) = std::env::var("KWINCTL_LIVE_INVENTORY") else {
        eprintln!("live_windows: skipped (set KWINCTL_LIVE_INVENTORY to run it)");
        return;
    };
    let inv = Inventory::load(std::path::Path::new(&inv)).unwrap();
    let hosts: Vec<_> = inv.hosts.iter().filter(|h| h.os == Os::Windows).collect();
    assert!(!hosts.is_empty(), "the live inventory has no Windows host");
    // 3 MiB: every byte value in every position, after a line that makes
    // this run's file new to the hosts
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("every-byte.bin");
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    let mut bytes = format!("kwinctl live push {nanos}\r\n").into_bytes();
    bytes.extend((0..3u32 << 20).map(|i| (i ^ (i >> 8) ^ (i >> 16)) as u8));
    std::fs::write(&path, &bytes).unwrap();
    let local = Local::of(&path).unwrap();
    let routes = transport::resolve(&hosts, &ConfigSource::Default).unwrap();
    let opts = ConnectOptions::new(std::time::Duration::from_secs(60), false, routes);
    let rt = tokio::runtime::Runtime::new().unwrap();
    for h in hosts {
        rt.block_on(async {
            let mut s = transport::connect(h, Interpreter::PowerShell, &opts)
                .await
                .unwrap_or_else(|e| panic!("{}: {e}", h.name));
            let files = std::slice::from_ref(&local);
            let first = transfer::push(&mut s, Target::Windows, files).await;
            let first = first.unwrap_or_else(|e| panic!("{}: {e}", h.name));
            assert_eq!(first[0].sent, local.size, "{}: {first:?}", h.name);
            let again = transfer::push(&mut s, Target::Windows, files).await;
            let again = again.unwrap_or_else(|e| panic!("{}: {e}", h.name));
            assert_eq!(again[0].sent, 0, "{}: sent again: {again:?}", h.name);
        });
    }
}
