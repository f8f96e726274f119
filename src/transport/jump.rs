//! Jump hosts (bastions): one SSH connection to each, opened on first use
//! and shared by every host behind it; hosts are reached over its
//! `direct-tcpip` channels (RFC 4254 7.2), as `ssh -J` does, with no
//! external process. A jump host that fails for good (host key, login) is
//! not tried again by every host behind it: they all get its error, which
//! names it.
//!
//! WinRM goes through a jump host too: winrm-rs connects to a URL, so a
//! SOCKS5 proxy on 127.0.0.1 (an ephemeral port, a random one-run password,
//! one target) hands each of its TCP connections to a channel of the same
//! shared connection. Through SOCKS the URL keeps the Windows host's
//! address, so TLS certificate names and pins are checked as without a
//! bastion.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::route::Endpoint;
use super::ssh::{Conn, open};
use super::trace::Trace;
use super::{ConnectOptions, TransportError};

enum Slot {
    Empty,
    Up(Arc<Conn>),
    /// Host key or login failures: the same for every host behind it.
    Failed(TransportError),
}

type Cell = Arc<tokio::sync::Mutex<Slot>>;

#[derive(Clone, Default)]
pub struct Pool(Arc<Mutex<HashMap<Endpoint, Cell>>>);

fn wrap(ep: &Endpoint, e: TransportError) -> TransportError {
    match e {
        // Already names the hop that failed.
        TransportError::Jump { .. } => e,
        e => TransportError::Jump {
            jump: format!("{} ({})", ep.name, ep.addr()),
            error: Box::new(e),
        },
    }
}

impl Pool {
    /// The shared connection to `ep`, opened now if it is not up.
    pub async fn get(
        &self,
        ep: &Arc<Endpoint>,
        opts: &ConnectOptions,
        trace: &Trace,
    ) -> Result<Arc<Conn>, TransportError> {
        let cell = self
            .0
            .lock()
            .unwrap()
            .entry((**ep).clone())
            .or_insert_with(|| Arc::new(tokio::sync::Mutex::new(Slot::Empty)))
            .clone();
        let mut slot = cell.lock().await;
        match &*slot {
            Slot::Up(c) if !c.is_closed() => {
                trace.mark("bastion connection shared", ep.name.clone(), 0);
                return Ok(c.clone());
            }
            Slot::Failed(e) => return Err(e.clone()),
            _ => {}
        }
        let who = format!("bastion {} ", ep.name);
        match open(ep, opts, trace, &who).await {
            Ok(c) => {
                let c = Arc::new(c);
                *slot = Slot::Up(c.clone());
                Ok(c)
            }
            Err(e) => {
                let e = wrap(ep, e);
                if !e.retriable() {
                    *slot = Slot::Failed(e.clone());
                }
                Err(e)
            }
        }
    }
}

/// A local SOCKS5 proxy to one target (through a jump connection, or
/// straight to it); closed when dropped.
pub struct Tunnel {
    /// `socks5://user:password@127.0.0.1:port`.
    pub url: String,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Tunnel {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The tunnel's SOCKS5 password: 96 random bits from the operating
/// system, or no tunnel (never a predictable one).
fn secret() -> Result<String, TransportError> {
    let mut b = [0u8; 12];
    getrandom::fill(&mut b).map_err(|e| {
        TransportError::Setup(format!(
            "cannot read random bytes for the WinRM tunnel's password: {e}"
        ))
    })?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// Where a tunnel's connections go: a channel of a jump host's connection,
/// or straight to the host (to reach it under another name, see
/// [`Tunnel::asked`]).
#[derive(Clone)]
pub enum Via {
    Ssh(Arc<Conn>),
    Direct,
}

/// A local SOCKS5 proxy whose one target is `asked`:`port` (the name the
/// client connects to, which may be a DNS name the proxy does not resolve)
/// and whose connections go to `host`:`port` through `via`. A name other
/// than the host lets winrm-rs put it in the URL (Kerberos names the
/// service principal after the URL's host) while the connection goes to
/// the inventory's address.
pub async fn tunnel(
    via: Via,
    asked: String,
    host: String,
    port: u16,
) -> Result<Tunnel, TransportError> {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .map_err(|e| {
            TransportError::Setup(format!(
                "cannot listen on 127.0.0.1 for the WinRM tunnel: {e}"
            ))
        })?;
    let local = listener
        .local_addr()
        .map_err(|e| TransportError::Setup(e.to_string()))?;
    let (user, pass) = ("kwinctl".to_string(), secret()?);
    // Only this run's WinRM client knows it; an error quoting the proxy URL
    // must not show it.
    crate::secret::register(&pass);
    // socks5h: the client passes a name unresolved (the proxy does not
    // resolve it either: it only checks it)
    let scheme = if asked == host { "socks5" } else { "socks5h" };
    let url = format!("{scheme}://{user}:{pass}@{local}");
    let task = tokio::spawn(async move {
        while let Ok((tcp, _)) = listener.accept().await {
            let (via, asked, host, pass) = (via.clone(), asked.clone(), host.clone(), pass.clone());
            tokio::spawn(async move {
                let _ = serve(tcp, via, &asked, &host, port, &pass).await;
            });
        }
    });
    Ok(Tunnel { url, task })
}

/// One SOCKS5 client (RFC 1928, user/password RFC 1929): only CONNECT, only
/// to the tunnel's target.
async fn serve(
    mut tcp: tokio::net::TcpStream,
    via: Via,
    asked: &str,
    host: &str,
    port: u16,
    pass: &str,
) -> std::io::Result<()> {
    let bad = || std::io::Error::other("bad SOCKS5 request");
    let mut head = [0u8; 2];
    tcp.read_exact(&mut head).await?;
    let mut methods = vec![0u8; head[1] as usize];
    tcp.read_exact(&mut methods).await?;
    if head[0] != 5 || !methods.contains(&2) {
        tcp.write_all(&[5, 0xff]).await?;
        return Err(bad());
    }
    tcp.write_all(&[5, 2]).await?;
    let mut v = [0u8; 2];
    tcp.read_exact(&mut v).await?;
    let mut u = vec![0u8; v[1] as usize];
    tcp.read_exact(&mut u).await?;
    let mut pl = [0u8; 1];
    tcp.read_exact(&mut pl).await?;
    let mut p = vec![0u8; pl[0] as usize];
    tcp.read_exact(&mut p).await?;
    if u != b"kwinctl" || p != pass.as_bytes() {
        tcp.write_all(&[1, 1]).await?;
        return Err(bad());
    }
    tcp.write_all(&[1, 0]).await?;
    let mut req = [0u8; 4];
    tcp.read_exact(&mut req).await?;
    let target = match req[3] {
        1 => {
            let mut a = [0u8; 4];
            tcp.read_exact(&mut a).await?;
            std::net::Ipv4Addr::from(a).to_string()
        }
        3 => {
            let mut l = [0u8; 1];
            tcp.read_exact(&mut l).await?;
            let mut n = vec![0u8; l[0] as usize];
            tcp.read_exact(&mut n).await?;
            String::from_utf8_lossy(&n).into_owned()
        }
        4 => {
            let mut a = [0u8; 16];
            tcp.read_exact(&mut a).await?;
            std::net::Ipv6Addr::from(a).to_string()
        }
        _ => return Err(bad()),
    };
    let mut pb = [0u8; 2];
    tcp.read_exact(&mut pb).await?;
    let reply = |code: u8| [5, code, 0, 1, 0, 0, 0, 0, 0, 0];
    if req[1] != 1 || target != asked || u16::from_be_bytes(pb) != port {
        tcp.write_all(&reply(2)).await?;
        return Err(bad());
    }
    let conn = match via {
        Via::Direct => {
            let mut out = match tokio::net::TcpStream::connect((host, port)).await {
                Ok(s) => s,
                Err(e) => {
                    tcp.write_all(&reply(5)).await?;
                    return Err(e);
                }
            };
            tcp.write_all(&reply(0)).await?;
            tokio::io::copy_bidirectional(&mut tcp, &mut out).await?;
            return Ok(());
        }
        Via::Ssh(conn) => conn,
    };
    let ch = match conn
        .channel_open_direct_tcpip(host, port as u32, "127.0.0.1", 0)
        .await
    {
        Ok(ch) => ch,
        Err(e) => {
            tcp.write_all(&reply(5)).await?;
            return Err(std::io::Error::other(e.to_string()));
        }
    };
    tcp.write_all(&reply(0)).await?;
    let mut stream = ch.into_stream();
    tokio::io::copy_bidirectional(&mut tcp, &mut stream).await?;
    Ok(())
}
