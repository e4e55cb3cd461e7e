//! A TCP proxy that makes a fast server slow: every chunk of bytes, in either direction, is
//! delivered a fixed delay after it arrived. It is a delay line, not a throttle: chunks that arrive
//! together leave together, so a round trip costs twice the delay however many messages it
//! carries, as on a long network path.
//!
//! Tests put it between the daemon and PostgreSQL to see what a slow store does to leases, and
//! between a model client and its server to count the connections the client opens.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::AbortHandle;
use tokio::time::Instant;

/// A running proxy. Dropping it closes the listener and every connection it carries.
#[derive(Debug)]
pub struct LatencyProxy {
    addr: SocketAddr,
    tasks: Arc<Mutex<Vec<AbortHandle>>>,
    accepted: Arc<AtomicUsize>,
}

impl LatencyProxy {
    /// Listens on a free port of 127.0.0.1 and forwards each connection to `upstream`, delaying
    /// every chunk by `delay` in each direction.
    pub async fn start(upstream: SocketAddr, delay: Duration) -> LatencyProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let tasks: Arc<Mutex<Vec<AbortHandle>>> = Arc::default();
        let registry = tasks.clone();
        let accepted = Arc::new(AtomicUsize::new(0));
        let counted = accepted.clone();
        let accept = tokio::spawn(async move {
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    continue;
                };
                counted.fetch_add(1, Ordering::SeqCst);
                let Ok(server) = TcpStream::connect(upstream).await else {
                    // The server is down: the client sees its connection closed, as it would
                    // without the proxy (a refused connection).
                    continue;
                };
                let _ = client.set_nodelay(true);
                let _ = server.set_nodelay(true);
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                let mut registry = registry.lock().unwrap();
                for (from, to) in [(client_read, server_write), (server_read, client_write)] {
                    let (reader, writer) = pipe(from, to, delay);
                    registry.push(reader.abort_handle());
                    registry.push(writer.abort_handle());
                }
            }
        });
        tasks.lock().unwrap().push(accept.abort_handle());
        LatencyProxy {
            addr,
            tasks,
            accepted,
        }
    }

    /// Where clients connect instead of the upstream server.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The connections clients have opened through the proxy so far.
    pub fn connections(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for LatencyProxy {
    fn drop(&mut self) {
        for task in self.tasks.lock().unwrap().drain(..) {
            task.abort();
        }
    }
}

/// One direction of a connection: a reader stamps each chunk with when it may leave, a writer
/// sends it then. End of stream travels the same way, so a close is delayed like data.
fn pipe(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    delay: Duration,
) -> (tokio::task::JoinHandle<()>, tokio::task::JoinHandle<()>) {
    let (tx, mut rx) = mpsc::unbounded_channel::<(Instant, Option<Vec<u8>>)>();
    let reader = tokio::spawn(async move {
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            let chunk = match from.read(&mut buf).await {
                Ok(0) | Err(_) => None,
                Ok(n) => Some(buf[..n].to_vec()),
            };
            let end = chunk.is_none();
            if tx.send((Instant::now() + delay, chunk)).is_err() || end {
                return;
            }
        }
    });
    let writer = tokio::spawn(async move {
        while let Some((due, chunk)) = rx.recv().await {
            tokio::time::sleep_until(due).await;
            let Some(chunk) = chunk else { break };
            if to.write_all(&chunk).await.is_err() {
                return;
            }
        }
        let _ = to.shutdown().await;
    });
    (reader, writer)
}
