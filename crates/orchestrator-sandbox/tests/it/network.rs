//! A granted network through the jail's proxy, against real processes: a server on the host's
//! loopback stands in for a host the policy lists, `curl` inside the jail reaches it through the
//! bridge and the proxy (or is refused), and nothing the jail listens on is reachable from the
//! host (issue 26, route 6: the dashboard's cookie was sent to a jailed listener).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use orchestrator_sandbox::{Confinement, Connection, ConnectionLog, Jail, Sandbox, SandboxMode};

use super::{WAYS, World, sandbox, sh, text, world};

/// A one-page HTTP server on the host's loopback, answering `hello from the host` to everything.
fn host_server() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            std::thread::spawn(move || {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && stream.read(&mut byte).unwrap_or(0) == 1 {
                    head.push(byte[0]);
                }
                let body = "hello from the host";
                let _ = write!(
                    stream,
                    "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                    body.len()
                );
            });
        }
    });
    port
}

type Log = Arc<Mutex<Vec<Connection>>>;

fn net_jail(sb: &Sandbox, w: &World, hosts: &[String]) -> (Jail, Log) {
    let log: Log = Arc::default();
    let sink = log.clone();
    let jail = sb
        .agent_jail(Confinement {
            mode: SandboxMode::WorkspaceWrite,
            network: true,
            network_hosts: hosts.to_vec(),
            connections: Some(ConnectionLog::new(move |c| sink.lock().unwrap().push(c))),
            workspace: w.workspace.clone(),
            env: vec![],
            secrets: vec![],
            label: "net-test".into(),
        })
        .unwrap();
    (jail, log)
}

/// The connections reported so far, once `n` of them are (a connection is reported when the
/// proxy is done with it, which may be a moment after the client is).
async fn reported(log: &Log, n: usize) -> Vec<Connection> {
    for _ in 0..200 {
        if log.lock().unwrap().len() >= n {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    log.lock().unwrap().clone()
}

/// `curl` through the proxy the environment names. `--noproxy ''` because the jail's NO_PROXY
/// keeps loopback addresses (the jail's own) away from the proxy, and the host's loopback is what
/// these tests stand a listed host on.
fn curl(extra: &str, url: &str) -> String {
    orchestrator_test_support::require(orchestrator_test_support::Program::Curl);
    format!("curl -sS --max-time 20 --noproxy '' {extra} {url}; echo \" exit=$?\"")
}

#[tokio::test]
async fn a_listed_host_is_reached_through_the_proxy_and_an_unlisted_one_is_refused() {
    for way in WAYS {
        eprintln!("{way:?}");
        let port = host_server();
        let w = world();
        let sb = sandbox(&w);
        let url = format!("http://127.0.0.1:{port}/page");

        let (listed, log) = net_jail(&sb, &w, &[format!("127.0.0.1:{port}")]);
        // Forwarded as an absolute-URI request, then tunnelled with CONNECT (-p), as https would be.
        for extra in ["", "-p"] {
            let said = text(&sh(way, &listed, &w.workspace, &curl(extra, &url)).await);
            assert!(
                said.contains("hello from the host") && said.contains("exit=0"),
                "curl {extra}: {said}"
            );
        }
        let seen = reported(&log, 2).await;
        assert_eq!(seen.len(), 2, "{seen:?}");
        for c in &seen {
            assert!(c.allowed && c.reason.is_none(), "{c:?}");
            assert_eq!((c.host.as_str(), c.port), ("127.0.0.1", port));
            assert_eq!(c.address, Some(SocketAddr::from(([127, 0, 0, 1], port))));
            assert!(c.bytes_down > 0, "{c:?}");
        }

        let (unlisted, log) = net_jail(&sb, &w, &[]);
        let said = text(&sh(way, &unlisted, &w.workspace, &curl("-i", &url)).await);
        assert!(said.contains("403"), "{said}");
        assert!(said.contains("network_hosts"), "{said}");
        assert!(!said.contains("hello from the host"), "{said}");
        let said = text(&sh(way, &unlisted, &w.workspace, &curl("-p", &url)).await);
        assert!(!said.contains("hello from the host"), "{said}");
        assert!(!said.contains("exit=0"), "{said}");
        let seen = reported(&log, 2).await;
        assert_eq!(seen.len(), 2, "{seen:?}");
        for c in &seen {
            assert!(!c.allowed, "{c:?}");
            assert!(
                c.reason.as_deref().unwrap_or("").contains("loopback"),
                "{c:?}"
            );
        }
        // Other spellings of the same place are refused too.
        for other in [
            format!("http://localhost:{port}/"),
            format!("http://[::ffff:127.0.0.1]:{port}/"),
            "http://169.254.169.254/latest/meta-data/".to_owned(),
            "http://metadata.google.internal/".to_owned(),
        ] {
            let said = text(&sh(way, &unlisted, &w.workspace, &curl("-i", &other)).await);
            assert!(said.contains("403"), "{other}: {said}");
        }
    }
}

#[tokio::test]
async fn an_interrupt_for_the_program_leaves_the_bridge_running() {
    for way in WAYS {
        eprintln!("{way:?}");
        let port = host_server();
        let w = world();
        let sb = sandbox(&w);
        let (j, _log) = net_jail(&sb, &w, &[format!("127.0.0.1:{port}")]);
        // What a terminal session's interrupt does: SIGINT to every process of the jail (here from
        // inside: all but the shell itself and the jail's init).
        let script = format!(
            "kill -INT -1; kill -QUIT -1; kill -HUP -1; sleep 0.2; {}",
            curl("", &format!("http://127.0.0.1:{port}/"))
        );
        let said = text(&sh(way, &j, &w.workspace, &script).await);
        assert!(said.contains("hello from the host"), "{said}");
    }
}

#[tokio::test]
async fn a_listed_name_is_resolved_by_the_proxy() {
    for way in WAYS {
        eprintln!("{way:?}");
        let port = host_server();
        let w = world();
        let sb = sandbox(&w);
        // `localhost` resolves through the host's /etc/hosts, outside the jail, where the proxy
        // resolves every name; the jail itself has no resolver that reaches anything.
        let (j, log) = net_jail(&sb, &w, &[format!("localhost:{port}")]);
        let said = text(
            &sh(
                way,
                &j,
                &w.workspace,
                &curl("-p", &format!("http://localhost:{port}/")),
            )
            .await,
        );
        assert!(said.contains("hello from the host"), "{said}");
        let seen = reported(&log, 1).await;
        assert!(seen[0].allowed, "{seen:?}");
        assert_eq!(seen[0].host, "localhost");
        assert!(
            seen[0].address.is_some_and(|a| a.ip().is_loopback()),
            "{seen:?}"
        );
        // The list names the name, not every spelling of its address.
        let said = text(
            &sh(
                way,
                &j,
                &w.workspace,
                &curl("-i", &format!("http://127.0.0.1:{port}/")),
            )
            .await,
        );
        assert!(said.contains("403"), "{said}");
    }
}

#[tokio::test]
async fn what_a_jail_listens_on_is_not_reachable_from_the_host() {
    let w = world();
    let sb = sandbox(&w);
    // A port free on the host now; the jail listens on it on its own loopback.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (j, _log) = net_jail(&sb, &w, &[]);
    let ready = w.workspace.join("listening");
    let script = format!(
        "python3 -c 'import socket, time; s = socket.socket(); s.bind((\"127.0.0.1\", {port})); s.listen(); open(\"{ready}\", \"w\").close(); time.sleep(30)'",
        ready = ready.display()
    );
    let mut child = j
        .shell(&script, &w.workspace, false)
        .unwrap()
        .spawn()
        .unwrap();
    for _ in 0..500 {
        if ready.exists() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(ready.exists(), "the jailed listener did not start");
    let err = TcpStream::connect_timeout(
        &SocketAddr::from(([127, 0, 0, 1], port)),
        Duration::from_secs(2),
    )
    .expect_err("the host reached a listener inside a jail");
    assert_eq!(err.kind(), std::io::ErrorKind::ConnectionRefused, "{err}");
    child.start_kill().unwrap();
    child.wait().await.unwrap();
}

#[tokio::test]
async fn the_programs_exit_status_and_environment_pass_through_the_bridge() {
    for way in WAYS {
        eprintln!("{way:?}");
        let w = world();
        let sb = sandbox(&w);
        let (j, _log) = net_jail(&sb, &w, &[]);
        let out = sh(
            way,
            &j,
            &w.workspace,
            "echo \"$HTTPS_PROXY $ALL_PROXY\"; exit 7",
        )
        .await;
        assert_eq!(out.status.code(), Some(7), "{}", text(&out));
        assert_eq!(
            text(&out),
            "http://127.0.0.1:3128 socks5h://127.0.0.1:1080\n"
        );
        assert!(j.limits_note().unwrap().contains("proxy"));
        // A program that is not there fails as a shell says so, not as a bridge failure.
        let out = j
            .command("/nonexistent/program", ["x"], &w.workspace)
            .unwrap()
            .output()
            .await
            .unwrap();
        assert_eq!(out.status.code(), Some(127), "{}", text(&out));
    }
}

/// A SOCKS5 exchange on the proxy's socket: greeting, then CONNECT to `address` (already encoded
/// with its type byte) and `port`; returns the reply code and the stream.
fn socks_connect(dir: &std::path::Path, address: &[u8], port: u16) -> (u8, UnixStream) {
    let mut s = UnixStream::connect(dir.join(orchestrator_sandbox::proxy::SOCKS_SOCKET)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    s.write_all(&[5, 1, 0]).unwrap();
    let mut choice = [0u8; 2];
    s.read_exact(&mut choice).unwrap();
    assert_eq!(choice, [5, 0], "no authentication");
    let mut request = vec![5, 1, 0];
    request.extend_from_slice(address);
    request.extend_from_slice(&port.to_be_bytes());
    s.write_all(&request).unwrap();
    let mut reply = [0u8; 10];
    s.read_exact(&mut reply).unwrap();
    assert_eq!(reply[0], 5);
    (reply[1], s)
}

#[tokio::test]
async fn the_socks_door_enforces_the_same_rules() {
    let port = host_server();
    let w = world();
    let sb = sandbox(&w);
    let (j, log) = net_jail(&sb, &w, &[format!("localhost:{port}")]);
    let dir = j.proxy_dir().unwrap().to_owned();
    // The proxy runs on this test's runtime: the blocking client goes to a thread of its own.
    let seen = tokio::task::spawn_blocking(move || {
        let mut name = vec![3, 9];
        name.extend_from_slice(b"localhost");
        let (code, mut s) = socks_connect(&dir, &name, port);
        assert_eq!(code, 0, "a listed name is connected");
        s.write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n")
            .unwrap();
        let mut body = String::new();
        s.read_to_string(&mut body).unwrap();
        assert!(body.ends_with("hello from the host"), "{body}");

        let (code, _) = socks_connect(&dir, &[1, 127, 0, 0, 1], port);
        assert_eq!(code, 2, "an unlisted loopback address is not allowed");
        let mut v6 = vec![4];
        v6.extend_from_slice(&std::net::Ipv6Addr::LOCALHOST.octets());
        let (code, _) = socks_connect(&dir, &v6, port);
        assert_eq!(code, 2, "nor in IPv6");
        let (code, _) = socks_connect(&dir, &[1, 169, 254, 169, 254], 80);
        assert_eq!(code, 2, "nor the metadata address");
    })
    .await;
    seen.unwrap();
    let seen = reported(&log, 4).await;
    assert_eq!(seen.iter().filter(|c| c.allowed).count(), 1, "{seen:?}");
    assert_eq!(seen.iter().filter(|c| !c.allowed).count(), 3, "{seen:?}");
    assert!(
        seen.iter()
            .all(|c| c.protocol == orchestrator_sandbox::Protocol::Socks5)
    );
}

#[tokio::test]
async fn the_proxy_stops_with_its_jail() {
    let w = world();
    let sb = sandbox(&w);
    let (j, _log) = net_jail(&sb, &w, &[]);
    let dir = j.proxy_dir().unwrap().to_owned();
    assert!(dir.join(orchestrator_sandbox::proxy::HTTP_SOCKET).exists());
    let clone = j.clone();
    drop(j);
    assert!(dir.exists(), "a clone keeps the proxy");
    drop(clone);
    assert!(!dir.exists(), "the last clone removes the sockets");
}
