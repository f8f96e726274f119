//! The lab's Kerberos realm from Rust tests (`lab/lab.sh kdc`, see
//! lab/kdc.sh): an MIT KDC in its own namespace, the operator's principal
//! and keytab, one service principal and keytab per simulated Windows host.
//! The operator's side (kwinctl, kinit) gets the realm's krb5.conf and a
//! credential cache of this lab's own through [`Kdc::env`].
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::Command;

use super::lab::{Lab, check, lab_sh};

pub struct Kdc {
    pub realm: String,
    /// The operator's principal, kwinctl@REALM.
    pub user: String,
    krb5_conf: PathBuf,
    keytab: PathBuf,
    ccache: PathBuf,
}

impl Lab {
    /// Start the lab's KDC (principals and keytabs for the Windows hosts
    /// the lab has).
    pub fn kdc(&self) -> Kdc {
        check(&lab_sh(&["kdc", &self.dir_s()]), "kdc");
        let env = std::fs::read_to_string(self.dir().join("lab.env")).expect("lab.env");
        let id = env
            .lines()
            .find_map(|l| l.strip_prefix("LAB_ID="))
            .expect("LAB_ID")
            .to_string();
        let realm = format!("KWL{id}.TEST");
        let kd = self.dir().join("kdc");
        Kdc {
            user: format!("kwinctl@{realm}"),
            realm,
            krb5_conf: kd.join("krb5.conf"),
            keytab: kd.join("kwinctl.keytab"),
            ccache: kd.join("operator.ccache"),
        }
    }

    /// Restart the KDC with its clock `offset` off ("+2h"; "" for the
    /// real time).
    pub fn kdc_clock(&self, offset: &str) {
        let mut args = vec!["kdc".to_string(), self.dir_s()];
        if !offset.is_empty() {
            args.extend(["--clock".to_string(), offset.to_string()]);
        }
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        check(&lab_sh(&args), "kdc --clock");
    }

    /// Stop the KDC (its address stays, nothing answers on port 88).
    pub fn kdc_stop(&self) {
        check(&lab_sh(&["kdc", &self.dir_s(), "--stop"]), "kdc --stop");
    }

    /// kadmin.local on the lab's KDC database.
    pub fn kadmin(&self, query: &str) {
        check(&lab_sh(&["kadmin", &self.dir_s(), query]), "kadmin");
    }
}

impl Kdc {
    /// What kwinctl and the Kerberos tools need to see this realm and the
    /// lab's credential cache.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("KRB5_CONFIG", self.krb5_conf.to_string_lossy().into_owned()),
            ("KRB5CCNAME", format!("FILE:{}", self.ccache.display())),
        ]
    }

    /// The operator's keytab (kwinctl@REALM's keys).
    pub fn keytab(&self) -> &std::path::Path {
        &self.keytab
    }

    /// `kinit` the operator from its keytab into the lab's credential
    /// cache, with `lifetime` ("10h", "3s").
    pub fn kinit(&self, lifetime: &str) {
        self.kinit_as(&self.user, &self.keytab, lifetime);
    }

    /// `kinit` `principal` from `keytab` into the lab's credential cache.
    pub fn kinit_as(&self, principal: &str, keytab: &std::path::Path, lifetime: &str) {
        let mut cmd = Command::new("kinit");
        cmd.args(["-l", lifetime, "-k", "-t"])
            .arg(keytab)
            .arg(principal);
        for (k, v) in self.env() {
            cmd.env(k, v);
        }
        let o = super::run_bounded(cmd, std::time::Duration::from_secs(60));
        assert!(o.status.success(), "kinit: {}", super::text(&o));
    }
}
