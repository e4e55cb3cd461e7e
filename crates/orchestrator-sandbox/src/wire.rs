//! What the daemon and a warm jail's supervisor say to each other (see warm.rs and
//! supervisor.rs): tag bytes and one length-prefixed request, pure functions tested as bytes.
//!
//! There are two kinds of socket. The control socket is the supervisor's stdin: each command is
//! one byte on it, [`HAS_STDIN`] and the other flags, carrying the command's descriptors with
//! `SCM_RIGHTS`: first a new connection (one end of a socket pair), then the standard streams the
//! flags name. A byte is read at a time, so each read takes exactly one command's descriptors.
//! Everything else about the command goes over its own connection: the [`Request`] first, then
//! the daemon's [`SIGNAL`] and [`ALIVE`] and the supervisor's [`STARTED`] or [`FAILED`], its
//! [`ANSWER`]s and one [`EXITED`]. A connection closed by the daemon ends the command's group; a
//! connection closed by the supervisor before [`EXITED`] means the jail is gone.

use std::ffi::OsString;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::PathBuf;

/// The supervisor's first byte on the control socket: it listens (the network bridge too).
pub(crate) const READY: u8 = b'R';

/// Flags of a command's byte on the control socket: which standard streams follow the
/// connection among its descriptors (in this order). A stream not sent is `/dev/null`.
pub(crate) const HAS_STDIN: u8 = 1;
pub(crate) const HAS_STDOUT: u8 = 2;
pub(crate) const HAS_STDERR: u8 = 4;

/// Daemon to supervisor: signal the command's process group; one byte, the signal's number,
/// follows.
pub(crate) const SIGNAL: u8 = b'S';
/// Daemon to supervisor: does the group still have a live (not zombie) process?
pub(crate) const ALIVE: u8 = b'A';

/// Supervisor to daemon: the command runs; its pid (the group's id, in the jail's pid namespace)
/// follows as a little-endian `u32`.
pub(crate) const STARTED: u8 = b'P';
/// Supervisor to daemon: the command could not be started; the OS error number (`i32`, 0 for
/// none), then a `u32` length and the message.
pub(crate) const FAILED: u8 = b'F';
/// Supervisor to daemon: the command's leader ended; its raw wait status (`i32`) follows.
pub(crate) const EXITED: u8 = b'X';
/// Supervisor to daemon: the answer to [`ALIVE`], one byte, 0 or 1, in the order asked.
pub(crate) const ANSWER: u8 = b'a';

/// The largest request accepted (argument and environment together); Linux's own limit on a
/// command line is far below it.
pub(crate) const MAX_REQUEST: usize = 64 << 20;
/// The largest failure message accepted.
pub(crate) const MAX_MESSAGE: usize = 64 << 10;

/// A command as the supervisor runs it: the program (searched on the environment's `PATH`), its
/// arguments, its directory and its whole environment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Request {
    pub program: OsString,
    pub args: Vec<OsString>,
    pub cwd: PathBuf,
    pub env: Vec<(OsString, OsString)>,
}

impl Request {
    /// The request with its length in front (`u32`, little-endian): the body is the program, the
    /// directory, the argument count and the arguments, the variable count and each name and
    /// value, every string as a `u32` length and its bytes.
    pub fn encode(&self) -> Vec<u8> {
        let mut body = Vec::new();
        let item = |body: &mut Vec<u8>, bytes: &[u8]| {
            body.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
            body.extend_from_slice(bytes);
        };
        item(&mut body, self.program.as_bytes());
        item(&mut body, self.cwd.as_os_str().as_bytes());
        body.extend_from_slice(&(self.args.len() as u32).to_le_bytes());
        for arg in &self.args {
            item(&mut body, arg.as_bytes());
        }
        body.extend_from_slice(&(self.env.len() as u32).to_le_bytes());
        for (name, value) in &self.env {
            item(&mut body, name.as_bytes());
            item(&mut body, value.as_bytes());
        }
        let mut out = Vec::with_capacity(body.len() + 4);
        out.extend_from_slice(&(body.len() as u32).to_le_bytes());
        out.extend_from_slice(&body);
        out
    }

    /// The body [`Request::encode`] wrote after the length; `None` if it is not one.
    pub fn decode(body: &[u8]) -> Option<Request> {
        let mut rest = body;
        let u32_ = |rest: &mut &[u8]| -> Option<usize> {
            let (head, tail) = rest.split_first_chunk::<4>()?;
            *rest = tail;
            Some(u32::from_le_bytes(*head) as usize)
        };
        let string = |rest: &mut &[u8]| -> Option<OsString> {
            let len = u32_(rest)?;
            if rest.len() < len {
                return None;
            }
            let (head, tail) = rest.split_at(len);
            *rest = tail;
            Some(OsString::from_vec(head.to_vec()))
        };
        let program = string(&mut rest)?;
        let cwd = PathBuf::from(string(&mut rest)?);
        let count = u32_(&mut rest)?;
        // Each string takes at least its length's four bytes: a count beyond that is a lie.
        if count > rest.len() / 4 {
            return None;
        }
        let mut args = Vec::with_capacity(count);
        for _ in 0..count {
            args.push(string(&mut rest)?);
        }
        let count = u32_(&mut rest)?;
        if count > rest.len() / 8 {
            return None;
        }
        let mut env = Vec::with_capacity(count);
        for _ in 0..count {
            let name = string(&mut rest)?;
            env.push((name, string(&mut rest)?));
        }
        rest.is_empty().then_some(Request {
            program,
            args,
            cwd,
            env,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_survives_the_trip_and_garbage_is_refused() {
        let request = Request {
            program: "/bin/sh".into(),
            args: vec!["-c".into(), "echo 'a b'\n".into(), OsString::new()],
            cwd: "/work/space".into(),
            env: vec![
                ("PATH".into(), "/usr/bin".into()),
                (OsString::from_vec(b"X\xff".to_vec()), "=".into()),
            ],
        };
        let bytes = request.encode();
        let len = u32::from_le_bytes(bytes[..4].try_into().unwrap()) as usize;
        assert_eq!(len, bytes.len() - 4);
        assert_eq!(Request::decode(&bytes[4..]), Some(request.clone()));
        for cut in 0..bytes.len() - 4 {
            assert_eq!(Request::decode(&bytes[4..4 + cut]), None, "cut at {cut}");
        }
        let mut longer = bytes[4..].to_vec();
        longer.push(0);
        assert_eq!(Request::decode(&longer), None);
        let mut huge = Request {
            args: Vec::new(),
            env: Vec::new(),
            ..request
        }
        .encode()[4..]
            .to_vec();
        let at = huge.len() - 8;
        huge[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(Request::decode(&huge), None);
    }
}
