//! A local HTTPS server for the tests that fetch checksum files: a CA and a
//! certificate for 127.0.0.1 it signs (made with `openssl`, fresh for each
//! server), serving fixed answers by path, recording the paths asked. The
//! client trusts the CA only through `--ca-file`, as an operator would
//! trust a mirror's private CA. Stopped when dropped.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};

pub struct Server {
    pub port: u16,
    /// The CA to trust (PEM).
    pub ca: PathBuf,
    /// The paths asked, in order.
    pub hits: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
    _dir: tempfile::TempDir,
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

impl Server {
    pub fn base(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }
}

fn openssl(dir: &std::path::Path, args: &[&str]) {
    let o = Command::new("openssl")
        .args(args)
        .current_dir(dir)
        .output()
        .expect("openssl (the tests make their certificates with it)");
    assert!(
        o.status.success(),
        "openssl {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// Serve `files` (path → status and body; for a 3xx status the body is
/// the Location) on 127.0.0.1 over HTTPS.
pub fn serve(files: BTreeMap<String, (u16, Vec<u8>)>) -> Server {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let mut ca = vec!["req", "-x509"];
    ca.extend(ec);
    ca.extend([
        "-keyout",
        "ca.key",
        "-out",
        "ca.pem",
        "-days",
        "2",
        "-subj",
        "/CN=kwinctl test CA",
        "-addext",
        "keyUsage=critical,keyCertSign,cRLSign",
    ]);
    openssl(d, &ca);
    let mut req = vec!["req"];
    req.extend(ec);
    req.extend([
        "-keyout",
        "srv.key",
        "-out",
        "srv.csr",
        "-subj",
        "/CN=127.0.0.1",
    ]);
    openssl(d, &req);
    std::fs::write(
        d.join("ext.cnf"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=critical,CA:FALSE\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    openssl(
        d,
        &[
            "x509",
            "-req",
            "-in",
            "srv.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-out",
            "srv.pem",
            "-days",
            "2",
            "-extfile",
            "ext.cnf",
        ],
    );
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(d.join("srv.pem"))
        .unwrap()
        .map(|c| c.unwrap())
        .collect();
    let key = PrivateKeyDer::from_pem_file(d.join("srv.key")).unwrap();
    let config = Arc::new(
        rustls::ServerConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap(),
    );
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let port = listener.local_addr().unwrap().port();
    let hits = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let files = Arc::new(files);
    {
        let (hits, stop) = (hits.clone(), stop.clone());
        std::thread::spawn(move || {
            // bounded: a test never lives this long
            let end = Instant::now() + Duration::from_secs(300);
            while !stop.load(Ordering::SeqCst) && Instant::now() < end {
                let Ok((tcp, _)) = listener.accept() else {
                    std::thread::sleep(Duration::from_millis(10));
                    continue;
                };
                let (config, files, hits) = (config.clone(), files.clone(), hits.clone());
                std::thread::spawn(move || {
                    let _ = tcp.set_nonblocking(false);
                    let _ = tcp.set_read_timeout(Some(Duration::from_secs(10)));
                    let _ = tcp.set_write_timeout(Some(Duration::from_secs(10)));
                    let conn = rustls::ServerConnection::new(config).unwrap();
                    let mut tls = rustls::StreamOwned::new(conn, tcp);
                    let mut req = Vec::new();
                    let mut buf = [0u8; 1024];
                    while !req.windows(4).any(|w| w == b"\r\n\r\n") && req.len() < 16384 {
                        match tls.read(&mut buf) {
                            Ok(0) | Err(_) => return,
                            Ok(n) => req.extend_from_slice(&buf[..n]),
                        }
                    }
                    let head = String::from_utf8_lossy(&req);
                    let path = head.split(' ').nth(1).unwrap_or("/").to_string();
                    hits.lock().unwrap().push(path.clone());
                    let (status, body) = files
                        .get(&path)
                        .cloned()
                        .unwrap_or((404, b"Not Found".to_vec()));
                    // a redirect: the body is where to
                    let (extra, body) = if (300..400).contains(&status) {
                        let to = String::from_utf8_lossy(&body).into_owned();
                        (format!("Location: {to}\r\n"), Vec::new())
                    } else {
                        (String::new(), body)
                    };
                    let head = format!(
                        "HTTP/1.1 {status} X\r\n{extra}Content-Length: {}\r\nConnection: close\r\n\r\n",
                        body.len()
                    );
                    let _ = tls.write_all(head.as_bytes());
                    let _ = tls.write_all(&body);
                    tls.conn.send_close_notify();
                    let _ = tls.flush();
                });
            }
        });
    }
    Server {
        port,
        ca: d.join("ca.pem"),
        hits,
        stop,
        _dir: dir,
    }
}
