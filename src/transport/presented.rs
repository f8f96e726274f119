//! The SHA-256 of the certificate a TLS listener presents, read with a TLS
//! handshake that accepts any certificate: only to show the operator what
//! to pin (`winrm.cert_sha256`) when the real, checking connection refused
//! it, as the SSH path shows an unknown host key's fingerprint. Nothing is
//! sent over this connection, and what it read is never trusted.

use std::io::Write;
use std::net::{SocketAddr, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{DigitallySignedStruct, SignatureScheme};
use sha2::{Digest, Sha256};

#[derive(Debug)]
struct Capture {
    provider: Arc<CryptoProvider>,
    seen: Mutex<Option<String>>,
}

impl ServerCertVerifier for Capture {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        let hex: String = Sha256::digest(end_entity.as_ref())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        *self.seen.lock().unwrap_or_else(|e| e.into_inner()) = Some(hex);
        // stop here: the certificate is all this connection is for
        Err(rustls::Error::General("certificate read".into()))
    }

    fn verify_tls12_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Err(rustls::Error::General("not trusted".into()))
    }

    fn verify_tls13_signature(
        &self,
        _message: &[u8],
        _cert: &CertificateDer<'_>,
        _dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        Err(rustls::Error::General("not trusted".into()))
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// The lowercase hex SHA-256 of the certificate `addr` presents, or `None`
/// when none could be read within `limit`.
pub fn cert_sha256(addr: SocketAddr, limit: Duration) -> Option<String> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let capture = Arc::new(Capture {
        provider: provider.clone(),
        seen: Mutex::new(None),
    });
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .ok()?
        .dangerous()
        .with_custom_certificate_verifier(capture.clone())
        .with_no_client_auth();
    let name = ServerName::IpAddress(addr.ip().into());
    let mut conn = rustls::ClientConnection::new(Arc::new(config), name).ok()?;
    let start = Instant::now();
    let mut sock = TcpStream::connect_timeout(&addr, limit).ok()?;
    sock.set_read_timeout(Some(limit)).ok()?;
    sock.set_write_timeout(Some(limit)).ok()?;
    while conn.is_handshaking() && start.elapsed() < limit {
        if conn.complete_io(&mut sock).is_err() {
            break;
        }
    }
    let _ = sock.flush();
    capture
        .seen
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .take()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_listening_is_none_within_the_limit() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        drop(l);
        let t = Instant::now();
        assert_eq!(cert_sha256(addr, Duration::from_secs(2)), None);
        assert!(t.elapsed() < Duration::from_secs(3));
    }
}
