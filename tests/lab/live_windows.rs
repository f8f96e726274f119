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
