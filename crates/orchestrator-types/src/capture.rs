//! Bounded capture of a byte stream of any length: the first half of the cap and the last half are
//! kept, with the count of bytes cut between them. Gate logs and spilled tool output use it, so a
//! command that prints a gibibyte costs a few mebibytes of memory.

/// Keeps at most `cap` bytes of a stream: a head of `cap / 2` and a tail of the rest.
#[derive(Debug, Clone)]
pub struct Capture {
    head_cap: usize,
    tail_cap: usize,
    head: Vec<u8>,
    /// The last bytes seen, at most `tail_cap`: filled in order, then a ring whose oldest byte is
    /// at `tail_start`, overwritten in place. The tail never holds more than its cap, so a
    /// capture costs its cap in memory and no `memmove` (an earlier tail grew to twice its cap
    /// and was compacted, which made a gate's log cost half as much again as it keeps).
    tail: Vec<u8>,
    tail_start: usize,
    total: u64,
}

/// What a capture kept. `cut` bytes lay between `head` and `tail`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Captured {
    pub head: Vec<u8>,
    pub tail: Vec<u8>,
    pub cut: u64,
}

impl Capture {
    pub fn new(cap: usize) -> Self {
        let head_cap = cap / 2;
        Capture::with_caps(head_cap, cap - head_cap)
    }

    /// A head of `head_cap` bytes and a tail of `tail_cap`, for a capture that is not a log's
    /// whole story (a live log's pending bytes, whose head is what is left of the log's head).
    pub fn with_caps(head_cap: usize, tail_cap: usize) -> Self {
        Capture {
            head_cap,
            tail_cap,
            head: Vec::new(),
            tail: Vec::new(),
            tail_start: 0,
            total: 0,
        }
    }

    pub fn push(&mut self, mut bytes: &[u8]) {
        self.total += bytes.len() as u64;
        if self.head.len() < self.head_cap {
            let take = bytes.len().min(self.head_cap - self.head.len());
            self.head.extend_from_slice(&bytes[..take]);
            bytes = &bytes[take..];
        }
        if bytes.len() >= self.tail_cap {
            self.tail.clear();
            self.tail
                .extend_from_slice(&bytes[bytes.len() - self.tail_cap..]);
            self.tail_start = 0;
            return;
        }
        if self.tail.len() < self.tail_cap {
            let fill = bytes.len().min(self.tail_cap - self.tail.len());
            // Grown by doubling as a Vec grows, but never past the cap.
            let want = (self.tail.len() + fill)
                .max(self.tail.capacity() * 2)
                .min(self.tail_cap);
            self.tail.reserve_exact(want - self.tail.len());
            self.tail.extend_from_slice(&bytes[..fill]);
            bytes = &bytes[fill..];
        }
        if bytes.is_empty() {
            return;
        }
        // The ring is full: the new bytes overwrite the oldest, up to the end and then from the
        // start (fewer than `tail_cap` of them, so they wrap at most once).
        let first = bytes.len().min(self.tail_cap - self.tail_start);
        self.tail[self.tail_start..self.tail_start + first].copy_from_slice(&bytes[..first]);
        let rest = &bytes[first..];
        self.tail[..rest.len()].copy_from_slice(rest);
        self.tail_start = (self.tail_start + bytes.len()) % self.tail_cap;
    }

    /// Bytes pushed so far, kept or not.
    pub fn total(&self) -> u64 {
        self.total
    }

    pub fn finish(self) -> Captured {
        let mut tail = self.tail;
        tail.rotate_left(self.tail_start);
        let kept = (self.head.len() + tail.len()) as u64;
        Captured {
            head: self.head,
            tail,
            cut: self.total - kept,
        }
    }
}

impl Captured {
    /// The whole stream, when it was short enough to keep whole.
    pub fn from_bytes(bytes: &[u8], cap: usize) -> Self {
        let mut capture = Capture::new(cap);
        capture.push(bytes);
        capture.finish()
    }

    /// Bytes the original stream had.
    pub fn original_len(&self) -> u64 {
        self.head.len() as u64 + self.cut + self.tail.len() as u64
    }

    /// Head, a marker line naming how many bytes were cut (only when some were), and tail.
    pub fn to_bytes(&self) -> Vec<u8> {
        let joint = self.joint();
        let mut out = Vec::with_capacity(self.head.len() + joint.len() + self.tail.len());
        out.extend_from_slice(&self.head);
        out.extend_from_slice(joint.as_bytes());
        out.extend_from_slice(&self.tail);
        out
    }

    /// What [`Captured::to_bytes`] puts between head and tail: nothing when nothing was cut, else
    /// the marker, after a line break that ends the head's last line. For a writer that streams
    /// the three parts rather than copy them into one buffer.
    pub fn joint(&self) -> String {
        if self.cut == 0 {
            return String::new();
        }
        let mut joint = String::new();
        if !self.head.ends_with(b"\n") && !self.head.is_empty() {
            joint.push('\n');
        }
        joint.push_str(&Self::marker(self.cut));
        joint
    }

    pub fn marker(cut: u64) -> String {
        format!("\n[... {cut} bytes cut by orchestrator: head and tail kept ...]\n\n")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_streams_are_kept_whole() {
        let mut capture = Capture::new(100);
        capture.push(b"hello ");
        capture.push(b"world");
        let captured = capture.finish();
        assert_eq!(captured.cut, 0);
        assert_eq!(captured.to_bytes(), b"hello world");
    }

    #[test]
    fn long_streams_keep_head_and_tail_in_any_chunking() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        for chunk in [1, 7, 64, 333, 499, 500, 501, 999, 10_000] {
            let mut capture = Capture::new(1000);
            for part in data.chunks(chunk) {
                capture.push(part);
            }
            let captured = capture.finish();
            assert_eq!(captured.head, data[..500], "chunk {chunk}");
            assert_eq!(captured.tail, data[data.len() - 500..], "chunk {chunk}");
            assert_eq!(captured.cut, 9_000);
            assert_eq!(captured.original_len(), 10_000);
            let text = String::from_utf8_lossy(&captured.to_bytes()).into_owned();
            assert!(text.contains("9000 bytes cut"), "chunk {chunk}");
        }
    }

    #[test]
    fn the_tail_never_holds_more_than_its_cap() {
        let data: Vec<u8> = (0..100_000u32).map(|i| (i % 241) as u8).collect();
        let mut capture = Capture::with_caps(10, 1000);
        for part in data.chunks(97) {
            capture.push(part);
            assert!(capture.tail.len() <= 1000);
            assert!(
                capture.tail.capacity() <= 1024,
                "{}",
                capture.tail.capacity()
            );
        }
        let captured = capture.finish();
        assert_eq!(captured.head, data[..10]);
        assert_eq!(captured.tail, data[data.len() - 1000..]);
    }
}
