//! What kwinctl says when Kerberos fails, each with its fix, in the lab of
//! lab_kerberos.rs: no ticket, an expired one, one of another principal,
//! clock skew (the KDC's clock off, under faketime), an unknown service
//! principal, an unreachable KDC, and a ticket the host cannot decrypt.

use crate::common;
use crate::lab_kerberos::{kerberos_lab, run};

use common::kdc::Kdc;
use common::lab::{Lab, require_root};
use common::{host, summary, text};

/// kwinctl's error for win1 on `plan`.
fn plan_error(lab: &Lab, kdc: &Kdc) -> String {
    let o = run(kdc, &["plan", "-i", &lab.inv(), "--output", "json"]);
    assert_ne!(o.status.code(), Some(0), "{}", text(&o));
    host(&summary(&o), "win1")["error"]
        .as_str()
        .unwrap_or_else(|| panic!("no error for win1: {}", text(&o)))
        .to_string()
}

#[test]
fn no_ticket_is_named_with_kinit() {
    if !require_root() {
        return;
    }
    let (lab, kdc) = kerberos_lab();
    let e = plan_error(&lab, &kdc);
    assert!(e.contains("no Kerberos ticket"), "{e}");
    assert!(e.contains(&format!("Run `kinit {}`", kdc.user)), "{e}");
}

#[test]
fn clock_skew_with_the_kdc_is_named() {
    if !require_root() {
        return;
    }
    let (lab, kdc) = kerberos_lab();
    kdc.kinit("10h");
    // the domain's clock two hours ahead of this machine's
    lab.kdc_clock("+2h");
    let e = plan_error(&lab, &kdc);
    assert!(
        e.starts_with("clock skew: this machine's clock and the KDC's"),
        "{e}"
    );
    assert!(e.contains("Clock skew too great"), "{e}");
}

#[test]
fn an_unknown_service_principal_is_named() {
    if !require_root() {
        return;
    }
    let (lab, kdc) = kerberos_lab();
    let spn = format!("HTTP/{}", lab.ip("win1"));
    lab.kadmin(&format!("delprinc -force {spn}@{}", kdc.realm));
    kdc.kinit("10h");
    let e = plan_error(&lab, &kdc);
    assert!(
        e.contains(&format!("the KDC knows no service principal {spn}")),
        "{e}"
    );
    assert!(
        e.contains("Set winrm.spn: HTTP/<the host's DNS name>")
            && e.contains(&format!("setspn -S {spn} <computer>")),
        "{e}"
    );
}

#[test]
fn an_expired_ticket_is_named_with_kinit() {
    if !require_root() {
        return;
    }
    let (lab, kdc) = kerberos_lab();
    kdc.kinit("2s");
    std::thread::sleep(std::time::Duration::from_secs(3));
    let e = plan_error(&lab, &kdc);
    assert!(
        e.contains(&format!("the Kerberos ticket of {} has expired", kdc.user)),
        "{e}"
    );
}

#[test]
fn a_kdc_that_cannot_be_reached_is_named() {
    if !require_root() {
        return;
    }
    let (lab, kdc) = kerberos_lab();
    kdc.kinit("10h");
    lab.kdc_stop();
    let e = plan_error(&lab, &kdc);
    assert!(e.contains("no KDC of the realm answered"), "{e}");
    assert!(
        e.contains(&format!("Cannot contact any KDC for realm '{}'", kdc.realm)),
        "{e}"
    );
}

/// The credential cache holds a ticket, but for another principal than
/// winrm.user: said before anything is sent to the host.
#[test]
fn a_ticket_for_another_principal_is_named() {
    if !require_root() {
        return;
    }
    let (lab, kdc) = kerberos_lab();
    let other = format!("someone@{}", kdc.realm);
    let keytab = lab.dir().join("kdc/someone.keytab");
    lab.kadmin(&format!("addprinc -randkey {other}"));
    lab.kadmin(&format!("ktadd -k {} {other}", keytab.display()));
    kdc.kinit_as(&other, &keytab, "10h");
    let e = plan_error(&lab, &kdc);
    assert!(
        e.contains(&format!("is for {other}, not for winrm.user {}", kdc.user)),
        "{e}"
    );
    let log = std::fs::read_to_string(lab.dir().join("hosts/win1/winsim.log")).unwrap();
    assert!(!log.contains("POST /wsman"), "{log}");
}

/// The KDC's keys for the host's principal changed and the host's keytab
/// did not follow (as when another account registered the SPN): the host
/// refuses the ticket, and kwinctl says where to look.
#[test]
fn a_ticket_the_host_cannot_read_is_named() {
    if !require_root() {
        return;
    }
    let (lab, kdc) = kerberos_lab();
    let spn = format!("HTTP/{}", lab.ip("win1"));
    lab.kadmin(&format!("cpw -randkey {spn}@{}", kdc.realm));
    kdc.kinit("10h");
    let e = plan_error(&lab, &kdc);
    assert!(
        e.contains(&format!("the host refused the Kerberos ticket for {spn}")),
        "{e}"
    );
    assert!(e.contains(&format!("setspn -Q {spn}")), "{e}");
}
