//! The host key check of a handshake: known_hosts as the run's cache holds
//! it, looked up on the runtime's thread; what reads or writes a file
//! (RevokedHostKeys, a key recorded by --accept-new-host-keys, a
//! known_hosts file changed since it was read) where `crate::blocking`
//! places short file work.

use std::sync::{Arc, Mutex};

use russh::client;

use crate::transport::TransportError;
use crate::transport::known_hosts::{self, Presented};
use crate::transport::route::Endpoint;

/// Checks the server's host key against known_hosts for one endpoint.
#[derive(Clone)]
pub struct Checker {
    pub(super) ep: Arc<Endpoint>,
    pub(super) accept_new: bool,
    pub(super) known_hosts: known_hosts::Cache,
    pub(super) verdict: Arc<Mutex<Option<TransportError>>>,
}

impl Checker {
    /// known_hosts as the run's cache holds it (read again only when a file
    /// changed); the RevokedHostKeys file and a key to record
    /// (--accept-new-host-keys) as `crate::blocking` places file work.
    async fn check(&self, owned: Owned) -> Result<(), TransportError> {
        let blocking = |e: tokio::task::JoinError| {
            TransportError::Setup(format!("checking the host key failed: {e}"))
        };
        let owned = if self.ep.revoked_host_keys.is_some() {
            let ep = self.ep.clone();
            crate::blocking::file_work(move || {
                known_hosts::check_revoked(&ep, &owned.presented()).map(|()| owned)
            })
            .await
            .map_err(blocking)??
        } else {
            owned
        };
        let snap = self
            .known_hosts
            .snapshot(known_hosts::files(&self.ep))
            .await?;
        let verdict = known_hosts::judge(&self.ep, owned.presented(), self.accept_new, &|n| {
            snap.lookup(n)
        })?;
        match verdict {
            known_hosts::Verdict::Trusted => Ok(()),
            known_hosts::Verdict::Learn {
                file,
                name,
                key,
                hash,
            } => crate::blocking::file_work(move || known_hosts::learn(&file, &name, &key, hash))
                .await
                .map_err(blocking)?,
        }
    }
}

/// The key the server presented, owned.
enum Owned {
    Key(russh::keys::PublicKey),
    Cert(Box<russh::keys::Certificate>),
}

impl Owned {
    fn presented(&self) -> Presented<'_> {
        match self {
            Owned::Key(k) => Presented::Key(k),
            Owned::Cert(c) => Presented::Cert(c),
        }
    }
}

impl client::Handler for Checker {
    type Error = russh::Error;

    async fn check_server_key(
        &mut self,
        key: &russh::keys::PublicKeyOrCertificate,
    ) -> Result<bool, Self::Error> {
        let owned = match key {
            russh::keys::PublicKeyOrCertificate::PublicKey { key, .. } => Owned::Key(key.clone()),
            russh::keys::PublicKeyOrCertificate::Certificate(c) => Owned::Cert(Box::new(c.clone())),
        };
        match self.check(owned).await {
            Ok(()) => Ok(true),
            Err(e) => {
                *self.verdict.lock().unwrap() = Some(e);
                Ok(false)
            }
        }
    }
}
