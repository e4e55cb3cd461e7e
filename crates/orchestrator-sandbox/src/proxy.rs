//! The network proxy of a jail: the only way out of a jail's network namespace.
//!
//! A jailed process never shares the host's network namespace (docs/security.md, route 6: a
//! process on the host's loopback can be sent the dashboard's cookie by the person's browser,
//! since cookies ignore ports). When its policy grants the network, the daemon runs this proxy
//! outside the jail, listening on two Unix sockets in a private directory that is bound
//! read-only into the jail: one speaks HTTP (CONNECT, and absolute-URI requests for `http://`
//! URLs), the other SOCKS5. Inside, the bridge (bridge.rs) offers them on the jail's own loopback
//! as `127.0.0.1:3128` and `127.0.0.1:1080`, and the jail's environment names them in
//! `HTTP_PROXY`, `HTTPS_PROXY` and `ALL_PROXY`.
//!
//! Each connection is decided by the guard (proxy/guard.rs): the proxy resolves the name itself,
//! drops the addresses the task may not reach and connects to one that passed. Each one, allowed
//! or refused, is reported to the jail's [`ConnectionLog`] when it ends, so the worker can write
//! it into the task's timeline.
//!
//! The proxy lives as long as the jail: its tasks are aborted, and its sockets removed with their
//! directory, when the jail's last clone is dropped.

mod guard;
mod http;
mod socks;

pub use guard::{HostList, LOCAL_REFRESH, forbidden, local_addresses};

use std::fmt;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tempfile::TempDir;
use tokio::net::{TcpStream, UnixListener, UnixStream};
use tokio::task::{JoinHandle, JoinSet};

use crate::{Error, Result};

/// The HTTP proxy's socket, in the proxy's directory.
pub const HTTP_SOCKET: &str = "http.sock";
/// The SOCKS5 proxy's socket, in the proxy's directory.
pub const SOCKS_SOCKET: &str = "socks.sock";

/// How long resolving a name, and then connecting to one address, may take.
const RESOLVE_TIMEOUT: Duration = Duration::from_secs(10);
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// Which of the proxy's doors a connection came through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// `CONNECT host:port` (https, and anything else tunnelled).
    HttpConnect,
    /// `GET http://host/...`: a plain http request forwarded by the proxy.
    HttpForward,
    Socks5,
}

impl Protocol {
    pub fn as_str(self) -> &'static str {
        match self {
            Protocol::HttpConnect => "http_connect",
            Protocol::HttpForward => "http_forward",
            Protocol::Socks5 => "socks5",
        }
    }
}

/// One connection a jailed process asked for, as the proxy decided it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Connection {
    pub protocol: Protocol,
    /// The host as the program named it (a name, or an address).
    pub host: String,
    pub port: u16,
    /// The address the proxy connected to (or tried last).
    pub address: Option<SocketAddr>,
    /// Whether the guard let it through. An allowed connection may still have failed to
    /// connect; `reason` then says why.
    pub allowed: bool,
    /// Why it was refused, or why it failed.
    pub reason: Option<String>,
    /// Bytes from the program to the remote end, and back; counted when the connection ends.
    pub bytes_up: u64,
    pub bytes_down: u64,
}

/// Where a jail's connections are reported: a callback the jail's creator supplies. It is called
/// on the proxy's tasks, so it must be quick (send to a channel, log).
#[derive(Clone)]
pub struct ConnectionLog(Arc<dyn Fn(Connection) + Send + Sync>);

impl ConnectionLog {
    pub fn new(report: impl Fn(Connection) + Send + Sync + 'static) -> Self {
        ConnectionLog(Arc::new(report))
    }

    fn report(&self, connection: Connection) {
        (self.0)(connection);
    }
}

impl fmt::Debug for ConnectionLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("ConnectionLog(..)")
    }
}

/// What every connection of one proxy is decided by and reported to.
#[derive(Debug)]
struct Rules {
    hosts: HostList,
    log: Option<ConnectionLog>,
}

/// A connection being handled: reported when dropped, so that a connection cut short by the
/// jail's end (its task aborted) is reported too.
struct Report<'a> {
    rules: &'a Rules,
    connection: Connection,
}

impl<'a> Report<'a> {
    fn new(rules: &'a Rules, protocol: Protocol, host: &str, port: u16) -> Self {
        Report {
            rules,
            connection: Connection {
                protocol,
                host: host.to_owned(),
                port,
                address: None,
                allowed: false,
                reason: None,
                bytes_up: 0,
                bytes_down: 0,
            },
        }
    }
}

impl Drop for Report<'_> {
    fn drop(&mut self) {
        let c = &self.connection;
        tracing::debug!(
            protocol = c.protocol.as_str(),
            host = %c.host,
            port = c.port,
            address = ?c.address,
            allowed = c.allowed,
            reason = c.reason.as_deref().unwrap_or(""),
            "sandbox network connection"
        );
        if let Some(log) = &self.rules.log {
            log.report(self.connection.clone());
        }
    }
}

/// Why no connection was made.
enum Refusal {
    /// The guard said no: the program may not go there.
    Denied(String),
    /// It may, but the name did not resolve or no address answered.
    Unreachable(String),
}

/// Decides and opens a connection to `host:port` for `report`'s program: the guard on the name
/// or literal address, one resolution, the guard on the addresses, then a connection to the
/// first permitted address that answers.
async fn open(report: &mut Report<'_>, host: &str, port: u16) -> Result<TcpStream, Refusal> {
    let rules: &Rules = report.rules;
    let hosts = &rules.hosts;
    let outcome = async {
        guard::check_host(hosts, host, port).map_err(Refusal::Denied)?;
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let resolved: Vec<SocketAddr> = match bare.parse() {
            Ok(ip) => vec![SocketAddr::new(ip, port)],
            Err(_) => tokio::time::timeout(RESOLVE_TIMEOUT, tokio::net::lookup_host((bare, port)))
                .await
                .map_err(|_| Refusal::Unreachable(format!("resolving {host} timed out")))?
                .map_err(|e| Refusal::Unreachable(format!("{host} could not be resolved: {e}")))?
                .collect(),
        };
        let permitted = guard::permitted(hosts, host, port, &resolved).map_err(Refusal::Denied)?;
        let mut last = String::new();
        for addr in permitted {
            report.connection.address = Some(addr);
            match tokio::time::timeout(CONNECT_TIMEOUT, TcpStream::connect(addr)).await {
                Ok(Ok(stream)) => return Ok(stream),
                Ok(Err(e)) => last = format!("{addr}: {e}"),
                Err(_) => last = format!("{addr}: timed out"),
            }
        }
        Err(Refusal::Unreachable(format!(
            "{host}:{port} could not be reached ({last})"
        )))
    }
    .await;
    match &outcome {
        Ok(_) => report.connection.allowed = true,
        Err(Refusal::Denied(why)) => report.connection.reason = Some(why.clone()),
        Err(Refusal::Unreachable(why)) => {
            report.connection.allowed = true;
            report.connection.reason = Some(why.clone());
        }
    }
    outcome
}

/// Copies both ways until both ends are done, counting into the report.
async fn relay<C>(report: &mut Report<'_>, client: &mut C, mut upstream: TcpStream)
where
    C: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    match tokio::io::copy_bidirectional(client, &mut upstream).await {
        Ok((up, down)) => {
            report.connection.bytes_up = up;
            report.connection.bytes_down = down;
        }
        Err(e) => report.connection.reason = Some(format!("the connection broke: {e}")),
    }
}

/// A jail's running proxy. Dropping it stops it.
#[derive(Debug)]
pub(crate) struct Proxy {
    dir: TempDir,
    tasks: Vec<JoinHandle<()>>,
}

impl Proxy {
    /// Starts the proxy for a jail labelled `label`, allowing what `hosts` lists besides public
    /// addresses, on the tokio runtime of the caller.
    pub(crate) fn start(
        jails: &Path,
        label: &str,
        hosts: &[String],
        log: Option<ConnectionLog>,
    ) -> Result<Self> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|e| {
            Error::Proxy(std::io::Error::other(format!(
                "the network proxy needs a tokio runtime: {e}"
            )))
        })?;
        // Its own directory (0700, so no other user of the host reaches the sockets), apart from
        // the jail's /tmp, so that the jailed process cannot replace the sockets; in the jails'
        // directory, which every jail has hidden, so no other jail reaches them either. Named
        // with this process's id, so the next daemon removes what a killed one left.
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::Builder::new()
            .prefix(&format!(
                "orchestrator-{label}-net-p{}-",
                std::process::id()
            ))
            .permissions(std::fs::Permissions::from_mode(0o700))
            .tempdir_in(jails)
            .map_err(Error::Proxy)?;
        let rules = Arc::new(Rules {
            hosts: HostList::new(hosts),
            log,
        });
        let mut tasks = Vec::new();
        for (name, protocol) in [(HTTP_SOCKET, Door::Http), (SOCKS_SOCKET, Door::Socks)] {
            let listener = std::os::unix::net::UnixListener::bind(dir.path().join(name))
                .map_err(Error::Proxy)?;
            listener.set_nonblocking(true).map_err(Error::Proxy)?;
            let rules = rules.clone();
            tasks.push(runtime.spawn(async move {
                match UnixListener::from_std(listener) {
                    Ok(listener) => accept_loop(listener, rules, protocol).await,
                    Err(e) => tracing::warn!("the sandbox's network proxy cannot listen: {e}"),
                }
            }));
        }
        Ok(Proxy { dir, tasks })
    }

    /// The directory holding the sockets, on the host.
    pub(crate) fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        // Aborting an accept loop drops its JoinSet, which aborts every connection it serves.
        for task in &self.tasks {
            task.abort();
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Door {
    Http,
    Socks,
}

async fn accept_loop(listener: UnixListener, rules: Arc<Rules>, door: Door) {
    let mut connections = JoinSet::new();
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            Err(e) => {
                // Out of descriptors, most likely: wait a moment rather than spin.
                tracing::warn!("the sandbox's network proxy could not accept: {e}");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        while connections.try_join_next().is_some() {}
        let rules = rules.clone();
        connections.spawn(async move { serve(stream, &rules, door).await });
    }
}

async fn serve(stream: UnixStream, rules: &Rules, door: Door) {
    match door {
        Door::Http => http::serve(stream, rules).await,
        Door::Socks => socks::serve(stream, rules).await,
    }
}
