//! Fetching small files over HTTPS from the operator's machine, with the
//! HTTP stack winrm-rs already brings (reqwest on rustls with ring): the
//! built-in Mozilla roots plus the operator's CA file, never an
//! unverified connection; HTTPS only, redirects included; every wait
//! bounded.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

use super::MAX_CHECKSUM_FILE;

/// How long one connection may take to open.
const CONNECT: Duration = Duration::from_secs(10);
/// How long one file may take, from the request to its last byte
/// (redirects included).
const WHOLE: Duration = Duration::from_secs(30);
/// dl.k8s.io and GitHub answer with one or two redirects to their CDN.
const REDIRECTS: usize = 5;

pub struct Client {
    http: reqwest::Client,
}

/// The CA certificates in the PEM file `path`.
fn roots_of(path: &Path) -> Result<Vec<CertificateDer<'static>>, String> {
    let shown = path.display();
    let certs = CertificateDer::pem_file_iter(path)
        .map_err(|e| format!("--ca-file {shown}: {e}"))?
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| format!("--ca-file {shown}: {e}"))?;
    if certs.is_empty() {
        return Err(format!(
            "--ca-file {shown} holds no certificate (give the mirror's CA as PEM, \
             -----BEGIN CERTIFICATE-----)"
        ));
    }
    Ok(certs)
}

impl Client {
    /// A client trusting the Mozilla roots and the certificates of
    /// `ca_file`.
    pub fn new(ca_file: Option<&Path>) -> Result<Client, String> {
        let mut roots =
            rustls::RootCertStore::from_iter(webpki_roots::TLS_SERVER_ROOTS.iter().cloned());
        if let Some(f) = ca_file {
            for c in roots_of(f)? {
                roots.add(c).map_err(|e| {
                    format!(
                        "--ca-file {}: not a usable CA certificate: {e}",
                        f.display()
                    )
                })?;
            }
        }
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let tls = rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("TLS set-up: {e}"))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        let http = reqwest::Client::builder()
            .tls_backend_preconfigured(tls)
            .https_only(true)
            .connect_timeout(CONNECT)
            .timeout(WHOLE)
            .redirect(reqwest::redirect::Policy::limited(REDIRECTS))
            .user_agent(concat!("kwinctl/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| format!("HTTPS set-up: {}", chain(&e)))?;
        Ok(Client { http })
    }

    /// Each URL's body (a 200 answer of at most [`MAX_CHECKSUM_FILE`]
    /// bytes), or why not; all at once, in the order given.
    pub fn get_all(&self, urls: &[String]) -> Vec<Result<Vec<u8>, String>> {
        let rt = match tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
        {
            Ok(rt) => rt,
            Err(e) => return urls.iter().map(|_| Err(format!("runtime: {e}"))).collect(),
        };
        rt.block_on(futures::future::join_all(
            urls.iter().map(|u| self.get(u.as_str())),
        ))
    }

    /// Download `url` into `dest` (created or truncated), a piece at a
    /// time as it comes, within `limit`: the body's size and SHA-256.
    pub fn download(
        &self,
        url: &str,
        dest: &Path,
        limit: Duration,
    ) -> Result<(u64, String), String> {
        use sha2::Digest;
        use std::io::Write;
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| format!("runtime: {e}"))?;
        let mut out =
            std::fs::File::create(dest).map_err(|e| format!("{}: {e}", dest.display()))?;
        let work = async {
            let mut resp = self
                .http
                .get(url)
                .timeout(limit)
                .send()
                .await
                .map_err(|e| chain(&e))?;
            if !resp.status().is_success() {
                return Err(format!("HTTP {}", resp.status()));
            }
            let (mut size, mut h) = (0u64, sha2::Sha256::new());
            while let Some(chunk) = resp.chunk().await.map_err(|e| chain(&e))? {
                h.update(&chunk);
                size += chunk.len() as u64;
                out.write_all(&chunk)
                    .map_err(|e| format!("{}: {e}", dest.display()))?;
            }
            out.sync_all()
                .map_err(|e| format!("{}: {e}", dest.display()))?;
            Ok((
                size,
                h.finalize().iter().map(|b| format!("{b:02x}")).collect(),
            ))
        };
        rt.block_on(async {
            tokio::time::timeout(limit + CONNECT, work)
                .await
                .unwrap_or_else(|_| Err(format!("not done within {}s", limit.as_secs())))
        })
    }

    async fn get(&self, url: &str) -> Result<Vec<u8>, String> {
        let work = async {
            let mut resp = self.http.get(url).send().await.map_err(|e| chain(&e))?;
            let status = resp.status();
            if !status.is_success() {
                return Err(format!(
                    "HTTP {status}{}",
                    if status == reqwest::StatusCode::NOT_FOUND {
                        " (no such checksum file: is the release right?)"
                    } else {
                        ""
                    }
                ));
            }
            let mut body = Vec::new();
            while let Some(chunk) = resp.chunk().await.map_err(|e| chain(&e))? {
                body.extend_from_slice(&chunk);
                if body.len() > MAX_CHECKSUM_FILE {
                    return Err(format!(
                        "more than {MAX_CHECKSUM_FILE} bytes: not a checksum file"
                    ));
                }
            }
            Ok(body)
        };
        // reqwest's own timeout covers the request; this bounds the whole
        tokio::time::timeout(WHOLE + CONNECT, work)
            .await
            .unwrap_or_else(|_| Err(format!("no answer within {}s", (WHOLE + CONNECT).as_secs())))
    }
}

/// An error with its causes (reqwest's own text names only the step), the
/// URL left out (the caller names it).
fn chain(e: &reqwest::Error) -> String {
    let mut s = if e.is_timeout() {
        "timed out".to_string()
    } else if e.is_connect() {
        "cannot connect".to_string()
    } else if e.is_redirect() {
        "too many redirects, or one to a plain http:// URL".to_string()
    } else {
        "request failed".to_string()
    };
    let mut src = std::error::Error::source(e);
    while let Some(c) = src {
        let t = crate::text::printable(&c.to_string());
        if !s.ends_with(&t) {
            s.push_str(": ");
            s.push_str(&t);
        }
        src = c.source();
    }
    s
}
