//! A gate's output while it runs, written to the store's live log a few times a second, so a
//! person on any node can follow it before the log artifact exists.
//!
//! The pipe's reader hands every read to a [`LiveTap`] (a copy into a bounded buffer under a lock
//! held for that copy only); a [`LiveWriter`] task takes what gathered every [`FLUSH_EVERY`], or
//! as soon as [`HEAD_FLUSH_BYTES`] of the log's head wait, and writes it as one transaction of
//! chunks. The reader never waits for the store: a slow store means fewer, larger writes, and
//! output that arrives faster than a write may carry ([`PENDING_HEAD_BYTES`] of the head,
//! [`FLUSH_TAIL_BYTES`] past it) is skipped in the live log and reads as a marker there, never in
//! the final artifact, which the reader keeps on its own. The buffer is small on purpose: the
//! gate-memory target (1 GiB of output under 64 MiB) holds with the live log. When the gate ends, its
//! recorded log replaces the live one (`record_gate` deletes it in its transaction).
//!
//! An agent's background processes, its terminal sessions and the background jobs of
//! exec_shell ([`BackgroundLogs`]), are written the same way, with one difference: the live log
//! is their only record, so its end is a last write (the last chunks and the program's exit,
//! `live_log_end`) rather than a deletion.

use orchestrator_store::{Lease, LiveLogHandle, LiveLogStart, Store, live_source};
use orchestrator_types::Capture;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// How often gathered output is written: what a follower waits at most for a line, and the most
/// writes a running gate makes per second.
pub const FLUSH_EVERY: Duration = Duration::from_millis(250);
/// Bytes past the head one write carries at most: the newest ones, when more arrived.
pub const FLUSH_TAIL_BYTES: usize = 128 * 1024;
/// Bytes of the log's head that wake the writer before its time: the head is written as fast as
/// the store takes it, so it is whole in the live log unless the store falls far behind.
pub const HEAD_FLUSH_BYTES: usize = 128 * 1024;
/// Bytes of the head the buffer holds at most between two writes.
pub const PENDING_HEAD_BYTES: usize = 512 * 1024;

/// Where the pipe's reader puts what it read, for the live log; a tap that is off keeps nothing.
#[derive(Clone, Default)]
pub struct LiveTap {
    pending: Option<Arc<Mutex<Pending>>>,
    /// Values never written as they are (the secrets a setup phase was given).
    redactor: Option<Arc<Mutex<Redactor>>>,
    /// Wakes the writer when enough of the head waits.
    wake: Arc<tokio::sync::Notify>,
}

struct Pending {
    /// What arrived since the last take: the rest of the log's head, and the newest bytes.
    capture: Capture,
    /// Where in the output `capture` starts.
    offset: u64,
    head_cap: u64,
}

/// What a take found: chunks at their offsets in the output, and the output's length.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gathered {
    pub pieces: Vec<(u64, Vec<u8>)>,
    pub total: u64,
}

fn pending_capture(head_cap: u64, offset: u64) -> Capture {
    let head_left = usize::try_from(head_cap.saturating_sub(offset)).unwrap_or(usize::MAX);
    Capture::with_caps(head_left.min(PENDING_HEAD_BYTES), FLUSH_TAIL_BYTES)
}

impl LiveTap {
    /// A tap whose output's first `head_cap` bytes are all kept.
    pub fn new(head_cap: u64) -> LiveTap {
        LiveTap {
            pending: Some(Arc::new(Mutex::new(Pending {
                capture: pending_capture(head_cap, 0),
                offset: 0,
                head_cap,
            }))),
            redactor: None,
            wake: Arc::default(),
        }
    }

    /// A tap that keeps nothing.
    pub fn off() -> LiveTap {
        LiveTap::default()
    }

    /// This tap, with every value of `secrets` (of at least 4 bytes) written as `[redacted]`,
    /// also where one arrives split between two reads: what could be the start of one is held
    /// back until the next read (or [`LiveTap::flush_redacted`]) says.
    pub fn redacting(mut self, secrets: &[String]) -> LiveTap {
        let redactor = Redactor::new(secrets);
        if !redactor.values.is_empty() {
            self.redactor = Some(Arc::new(Mutex::new(redactor)));
        }
        self
    }

    /// Writes what the redactor still holds back: the output ended.
    pub fn flush_redacted(&self) {
        if let Some(redactor) = &self.redactor {
            let rest = redactor.lock().unwrap_or_else(|e| e.into_inner()).finish();
            self.push_plain(&rest);
        }
    }

    /// How many bytes of output were taken so far.
    pub fn taken(&self) -> u64 {
        self.pending
            .as_ref()
            .map_or(0, |p| p.lock().unwrap_or_else(|e| e.into_inner()).offset)
    }

    pub(crate) fn push(&self, bytes: &[u8]) {
        match &self.redactor {
            Some(redactor) => {
                let out = redactor
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .feed(bytes);
                self.push_plain(&out);
            }
            None => self.push_plain(bytes),
        }
    }

    fn push_plain(&self, bytes: &[u8]) {
        if let Some(pending) = &self.pending {
            // A poisoned lock only means a writer panicked mid-copy; the bytes are still bytes.
            let mut pending = pending.lock().unwrap_or_else(|e| e.into_inner());
            let before = pending.capture.total();
            pending.capture.push(bytes);
            let in_head = pending.head_cap.saturating_sub(pending.offset);
            let head_waiting = pending.capture.total().min(in_head);
            drop(pending);
            if head_waiting >= HEAD_FLUSH_BYTES as u64 && before < in_head {
                self.wake.notify_one();
            }
        }
    }

    /// What arrived since the last take, if anything did.
    pub fn take(&self) -> Option<Gathered> {
        let pending = self.pending.as_ref()?;
        let mut pending = pending.lock().unwrap_or_else(|e| e.into_inner());
        if pending.capture.total() == 0 {
            return None;
        }
        let offset = pending.offset;
        let next = offset + pending.capture.total();
        let fresh = pending_capture(pending.head_cap, next);
        let captured = std::mem::replace(&mut pending.capture, fresh).finish();
        pending.offset = next;
        drop(pending);
        let tail_at = offset + captured.head.len() as u64 + captured.cut;
        Some(Gathered {
            pieces: [(offset, captured.head), (tail_at, captured.tail)]
                .into_iter()
                .filter(|(_, bytes)| !bytes.is_empty())
                .collect(),
            total: next,
        })
    }
}

/// Replaces secret values in a stream read in pieces.
struct Redactor {
    values: Vec<Vec<u8>>,
    /// The end of what was fed that could be the start of a value.
    held: Vec<u8>,
}

/// What a redacted value reads as.
pub const REDACTED: &[u8] = b"[redacted]";

impl Redactor {
    fn new(secrets: &[String]) -> Redactor {
        let mut values: Vec<Vec<u8>> = secrets
            .iter()
            .filter(|s| s.len() >= 4)
            .map(|s| s.as_bytes().to_vec())
            .collect();
        // The longest first, so a value that holds another is replaced whole.
        values.sort_by_key(|v| std::cmp::Reverse(v.len()));
        values.dedup();
        Redactor {
            values,
            held: Vec::new(),
        }
    }

    /// What can be written of `held` + `bytes`: redacted, less an end that may start a value.
    fn feed(&mut self, bytes: &[u8]) -> Vec<u8> {
        self.held.extend_from_slice(bytes);
        let replaced = redact_all(&self.held, &self.values);
        let keep = self
            .values
            .iter()
            .map(|v| partial_suffix(&replaced, v))
            .max()
            .unwrap_or(0);
        let split = replaced.len() - keep;
        self.held = replaced[split..].to_vec();
        replaced[..split].to_vec()
    }

    fn finish(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.held)
    }
}

/// `bytes` with every occurrence of each value replaced by [`REDACTED`].
pub fn redact_all(bytes: &[u8], values: &[Vec<u8>]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    'next: while i < bytes.len() {
        for value in values {
            if bytes[i..].starts_with(value) {
                out.extend_from_slice(REDACTED);
                i += value.len();
                continue 'next;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    out
}

/// `captured` with every value written as [`REDACTED`], also one that straddles the head and the
/// tail: kept whole (nothing cut) they are redacted as one text; with bytes cut between them, a
/// head that ends with the start of a value and a tail that starts with the end of one lose
/// those pieces too.
pub fn redact_captured(captured: &mut orchestrator_types::Captured, values: &[Vec<u8>]) {
    if values.is_empty() {
        return;
    }
    if captured.cut == 0 {
        let mut whole = std::mem::take(&mut captured.head);
        whole.extend(std::mem::take(&mut captured.tail));
        captured.head = redact_all(&whole, values);
        return;
    }
    let mut head = redact_all(&captured.head, values);
    let mut tail = redact_all(&captured.tail, values);
    let end = values
        .iter()
        .map(|v| partial_suffix(&head, v))
        .max()
        .unwrap_or(0);
    if end > 0 {
        head.truncate(head.len() - end);
        head.extend_from_slice(REDACTED);
    }
    let start = values
        .iter()
        .map(|v| {
            (1..v.len().min(tail.len() + 1))
                .rev()
                .find(|n| tail.starts_with(&v[v.len() - n..]))
                .unwrap_or(0)
        })
        .max()
        .unwrap_or(0);
    if start > 0 {
        let mut fresh = REDACTED.to_vec();
        fresh.extend_from_slice(&tail[start..]);
        tail = fresh;
    }
    captured.head = head;
    captured.tail = tail;
}

/// The length of the longest end of `bytes` that is a proper start of `value`.
fn partial_suffix(bytes: &[u8], value: &[u8]) -> usize {
    (1..value.len().min(bytes.len() + 1))
        .rev()
        .find(|n| bytes.ends_with(&value[..*n]))
        .unwrap_or(0)
}

/// Writes one command's live log while it runs.
pub struct LiveWriter {
    tap: LiveTap,
    stop: CancellationToken,
    task: Option<JoinHandle<()>>,
    handle: Option<LiveLogHandle>,
}

impl LiveWriter {
    /// Starts the live log and its writer. A store that cannot start it costs the live view only:
    /// the command runs and its final log is kept as always.
    pub async fn start(store: &Store, start: &LiveLogStart<'_>) -> LiveWriter {
        let handle = match store.live_log_start(start).await {
            Ok(handle) => handle,
            Err(err) => {
                tracing::warn!(task = %start.lease.task_id, name = start.name, %err, "no live log for this run");
                return LiveWriter {
                    tap: LiveTap::off(),
                    stop: CancellationToken::new(),
                    task: None,
                    handle: None,
                };
            }
        };
        let tap = LiveTap::new(start.head_cap);
        let stop = CancellationToken::new();
        let task = tokio::spawn(write_loop(store.clone(), handle, tap.clone(), stop.clone()));
        LiveWriter {
            tap,
            stop,
            task: Some(task),
            handle: Some(handle),
        }
    }

    /// This writer, writing each value of `secrets` as `[redacted]` (see [`LiveTap::redacting`]).
    pub fn redacting(mut self, secrets: &[String]) -> LiveWriter {
        self.tap = self.tap.clone().redacting(secrets);
        self
    }

    /// Where the command's reader puts its output.
    pub fn tap(&self) -> LiveTap {
        self.tap.clone()
    }

    /// Stops writing (the command ended; its final log is recorded next and replaces this one).
    pub async fn finish(mut self) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            task.await.ok();
        }
    }
}

impl LiveWriter {
    /// Ends a live log that has no other record (a setup command's): its last bytes, why it
    /// ended and the exit code. Nothing is lost if the store cannot write it: the command's whole
    /// log is kept as an artifact.
    pub async fn end(mut self, store: &Store, reason: &str, exit_code: Option<i64>) {
        self.stop.cancel();
        if let Some(task) = self.task.take() {
            task.await.ok();
        }
        let Some(handle) = self.handle else { return };
        self.tap.flush_redacted();
        let gathered = self.tap.take();
        let (pieces, total): (Vec<(u64, &[u8])>, u64) = match &gathered {
            Some(g) => (
                g.pieces.iter().map(|(o, b)| (*o, b.as_slice())).collect(),
                g.total,
            ),
            None => (Vec::new(), self.tap.taken()),
        };
        if let Err(err) = store
            .live_log_end(&handle, &pieces, total, reason, exit_code)
            .await
        {
            tracing::warn!(live_log = handle.id, %err, "could not end a live log");
        }
    }
}

impl Drop for LiveWriter {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn write_loop(store: Store, log: LiveLogHandle, tap: LiveTap, stop: CancellationToken) {
    let mut warned = false;
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            () = tokio::time::sleep(FLUSH_EVERY) => {}
            () = tap.wake.notified() => {}
        }
        let Some(gathered) = tap.take() else { continue };
        let pieces: Vec<(u64, &[u8])> = gathered
            .pieces
            .iter()
            .map(|(offset, bytes)| (*offset, bytes.as_slice()))
            .collect();
        match store.live_log_append(&log, &pieces, gathered.total).await {
            Ok(true) => {}
            // Replaced or recorded: nobody reads this log any more.
            Ok(false) => return,
            // Lost bytes read as a marker in the live log; the final log has them.
            Err(err) if !warned => {
                warned = true;
                tracing::warn!(live_log = log.id, %err, "could not write a live log; trying on");
            }
            Err(_) => {}
        }
    }
}

/// Records an agent's background processes (terminal sessions, exec_shell's background jobs) in
/// the store's live logs: an [`orchestrator_tools::OutputRecorder`] for the attempt of `lease`.
pub struct BackgroundLogs {
    pub store: Store,
    pub lease: Lease,
    pub attempt: i64,
    /// The log cap: half of it is the head kept whole, half the tail.
    pub cap: usize,
}

/// How a background process's program ended: in words, and its exit code when it exited.
type ProcessEnd = (String, Option<i64>);

/// One background process's tap, and the way to say it ended.
struct ProcessTap {
    tap: LiveTap,
    end: Mutex<Option<tokio::sync::oneshot::Sender<ProcessEnd>>>,
}

impl orchestrator_tools::OutputRecorder for BackgroundLogs {
    fn open(
        &self,
        process: orchestrator_tools::Background,
        command: &str,
    ) -> Arc<dyn orchestrator_tools::OutputTap> {
        let (source, number) = match process {
            orchestrator_tools::Background::Terminal(n) => (live_source::TERMINAL, n),
            orchestrator_tools::Background::Job(n) => (live_source::BACKGROUND_JOB, n),
        };
        let head_cap = (self.cap / 2) as u64;
        let tap = LiveTap::new(head_cap);
        let (end_tx, end_rx) = tokio::sync::oneshot::channel();
        tokio::spawn(record_loop(
            self.store.clone(),
            self.lease.clone(),
            self.attempt,
            (source, i64::try_from(number).unwrap_or(i64::MAX)),
            command.to_owned(),
            (head_cap, (self.cap - self.cap / 2) as u64),
            tap.clone(),
            end_rx,
        ));
        Arc::new(ProcessTap {
            tap,
            end: Mutex::new(Some(end_tx)),
        })
    }
}

impl orchestrator_tools::OutputTap for ProcessTap {
    fn push(&self, bytes: &[u8]) {
        self.tap.push(bytes);
    }

    fn end(&self, reason: String, exit_code: Option<i64>) {
        let sender = self.end.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(sender) = sender {
            let _ = sender.send((reason, exit_code));
        }
    }
}

/// Starts a background process's live log (a terminal's, a background job's), writes what
/// gathered every [`FLUSH_EVERY`] like a gate's, and at the end writes the rest with the end.
/// Output that came before the log started waits in the tap, so nothing the program printed
/// first is lost to the start's round trip.
#[allow(clippy::too_many_arguments)]
async fn record_loop(
    store: Store,
    lease: Lease,
    attempt: i64,
    (source, key): (&'static str, i64),
    name: String,
    (head_cap, tail_cap): (u64, u64),
    tap: LiveTap,
    mut end: tokio::sync::oneshot::Receiver<ProcessEnd>,
) {
    let start = LiveLogStart {
        lease: &lease,
        source,
        key,
        attempt,
        name: &name,
        head_cap,
        tail_cap,
    };
    let log = match store.live_log_start(&start).await {
        Ok(log) => log,
        Err(err) => {
            tracing::warn!(task = %lease.task_id, source, key, %err, "no live log for this background process");
            return;
        }
    };
    let mut total = 0;
    let mut warned = false;
    loop {
        let ended = tokio::select! {
            ended = &mut end => Some(ended.unwrap_or_else(|_| ("the session ended".to_owned(), None))),
            () = tokio::time::sleep(FLUSH_EVERY) => None,
            () = tap.wake.notified() => None,
        };
        let gathered = tap.take();
        if let Some(gathered) = &gathered {
            total = gathered.total;
        }
        let pieces: Vec<(u64, &[u8])> = gathered
            .iter()
            .flat_map(|g| g.pieces.iter())
            .map(|(offset, bytes)| (*offset, bytes.as_slice()))
            .collect();
        let written = match &ended {
            Some((reason, exit_code)) => {
                store
                    .live_log_end(&log, &pieces, total, reason, *exit_code)
                    .await
            }
            None if pieces.is_empty() => continue,
            None => store.live_log_append(&log, &pieces, total).await,
        };
        match written {
            Ok(true) if ended.is_none() => {}
            // Ended, replaced, or ended by the rescuer: nothing more to write.
            Ok(_) => return,
            Err(err) => {
                if !warned {
                    warned = true;
                    tracing::warn!(live_log = log.id, %err, "could not write a background process's live log");
                }
                // The end is said once; what a failed last write carried is lost to the view.
                if ended.is_some() {
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A secret kept whole or cut between a capture's head and tail is never in it as it is.
    #[test]
    fn a_captured_log_never_keeps_a_secret_across_its_halves() {
        let values = vec![b"s3cr3t-value".to_vec()];
        let mut whole = orchestrator_types::Captured {
            head: b"token=s3cr3t".to_vec(),
            tail: b"-value; done".to_vec(),
            cut: 0,
        };
        redact_captured(&mut whole, &values);
        assert_eq!(whole.head, b"token=[redacted]; done");
        assert!(whole.tail.is_empty());
        let mut cut = orchestrator_types::Captured {
            head: b"token=s3cr".to_vec(),
            tail: b"t-value; done".to_vec(),
            cut: 100,
        };
        redact_captured(&mut cut, &values);
        assert_eq!(cut.head, b"token=[redacted]");
        assert_eq!(cut.tail, b"[redacted]; done");
    }

    /// A secret is never written as it is, whole in one read or split across several, and
    /// everything else arrives unchanged and in order.
    #[test]
    fn a_redacting_tap_never_writes_a_secret_however_the_reads_split_it() {
        let secret = "s3cr3t-value".to_owned();
        let text = b"token=s3cr3t-value; again s3cr3t-value; s3cr3t-valu end s3c";
        for split in 1..text.len() {
            let tap = LiveTap::new(1 << 20).redacting(std::slice::from_ref(&secret));
            for piece in text.chunks(split) {
                tap.push(piece);
            }
            tap.flush_redacted();
            let got = tap.take().expect("bytes");
            let all: Vec<u8> = got.pieces.into_iter().flat_map(|(_, b)| b).collect();
            assert_eq!(
                String::from_utf8(all).unwrap(),
                "token=[redacted]; again [redacted]; s3cr3t-valu end s3c",
                "reads of {split} bytes"
            );
        }
    }

    #[test]
    fn takes_carry_the_head_whole_and_the_newest_bytes() {
        let tap = LiveTap::new(10);
        assert_eq!(tap.take(), None);
        tap.push(b"0123456");
        let first = tap.take().expect("bytes");
        assert_eq!(first.pieces, vec![(0, b"0123456".to_vec())]);
        assert_eq!(first.total, 7);
        assert_eq!(tap.take(), None);
        // The head's last 3 bytes, then more than one take carries past the head.
        let flood = vec![b'x'; FLUSH_TAIL_BYTES + 1003];
        tap.push(b"789");
        tap.push(&flood);
        let second = tap.take().expect("bytes");
        assert_eq!(second.total, 10 + flood.len() as u64);
        assert_eq!(second.pieces[0], (7, b"789".to_vec()));
        let (tail_at, tail) = &second.pieces[1];
        assert_eq!(tail.len(), FLUSH_TAIL_BYTES);
        assert_eq!(*tail_at, second.total - FLUSH_TAIL_BYTES as u64);
        tap.push(b"end");
        let third = tap.take().expect("bytes");
        assert_eq!(third.pieces, vec![(second.total, b"end".to_vec())]);
    }

    #[test]
    fn a_tap_that_is_off_keeps_nothing() {
        let tap = LiveTap::off();
        tap.push(b"anything");
        assert_eq!(tap.take(), None);
    }
}
