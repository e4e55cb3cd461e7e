//! What the local servers of the tests share: a listener bound synchronously (so the address is
//! known before the server runs), serving on the caller's runtime or on a thread of its own, with
//! TCP_NODELAY, until the owner drops its stop sender.

use std::future::IntoFuture;
use std::net::SocketAddr;

use axum::Router;
use tokio::sync::oneshot;

/// A listener on 127.0.0.1 with a free port, ready for tokio.
pub(crate) fn bind() -> (std::net::TcpListener, SocketAddr) {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.set_nonblocking(true).unwrap();
    let addr = listener.local_addr().unwrap();
    (listener, addr)
}

/// Serves `app` on the current tokio runtime.
pub(crate) fn spawn(listener: std::net::TcpListener, app: Router, stop: oneshot::Receiver<()>) {
    let listener = tokio::net::TcpListener::from_std(listener).unwrap();
    tokio::spawn(serve(listener, app, stop));
}

/// Serves `app` on a thread with its own runtime, for tests that have none; it keeps answering
/// while the test blocks on other processes. Dropping the runtime on the way out also ends
/// connections that hang.
pub(crate) fn spawn_on_thread(
    name: &str,
    listener: std::net::TcpListener,
    app: Router,
    stop: oneshot::Receiver<()>,
) {
    std::thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                serve(listener, app, stop).await;
            });
        })
        .unwrap();
}

async fn serve(listener: tokio::net::TcpListener, app: Router, stop: oneshot::Receiver<()>) {
    // Without TCP_NODELAY many small writes (SSE events) stall on Nagle's algorithm and delayed
    // ACKs, about 40 ms each, which would make the clients look slow.
    let listener = axum::serve::ListenerExt::tap_io(listener, |tcp| {
        let _ = tcp.set_nodelay(true);
    });
    tokio::select! {
        result = axum::serve(listener, app).into_future() => result.unwrap(),
        // Fires when the server's owner is dropped, which drops the sender.
        _ = stop => {}
    }
}
