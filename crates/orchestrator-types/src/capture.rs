//! Bounded capture of a byte stream of any length: the first half of the cap and the last half are
//! kept, with the count of bytes cut between them. Gate logs and spilled tool output use it, so a
//! command that prints a gibibyte costs a few mebibytes of memory.

/// Keeps at most `cap` bytes of a stream: a head of `cap / 2` and a tail of the rest.
#[derive(Debug, Clone)]
pub struct Capture {
    head_cap: usize,
    tail_cap: usize,
    head: Vec<u8>,
    /// The last bytes seen; may hold up to twice `tail_cap` before it is compacted, so that
    /// keeping the tail costs one `memmove` per `tail_cap` bytes instead of work per byte.
    tail: Vec<u8>,
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
            return;
        }
        self.tail.extend_from_slice(bytes);
        if self.tail.len() > 2 * self.tail_cap {
            let excess = self.tail.len() - self.tail_cap;
            self.tail.drain(..excess);
        }
    }

    /// Bytes pushed so far, kept or not.
    pub fn total(&self) -> u64 {
        self.total
    }

    pub fn finish(self) -> Captured {
        let mut tail = self.tail;
        if tail.len() > self.tail_cap {
            tail.drain(..tail.len() - self.tail_cap);
        }
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
        let mut out = Vec::with_capacity(self.head.len() + self.tail.len() + 80);
        out.extend_from_slice(&self.head);
        if self.cut > 0 {
            if !self.head.ends_with(b"\n") && !self.head.is_empty() {
                out.push(b'\n');
            }
            out.extend_from_slice(Self::marker(self.cut).as_bytes());
        }
        out.extend_from_slice(&self.tail);
        out
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
        for chunk in [1, 7, 64, 999, 10_000] {
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
}
