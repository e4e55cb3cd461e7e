//! Reading a kept stream from a byte offset, for followers of a log that is still being written.
//!
//! A kept stream is a few pieces at known offsets of the original stream: a finished log's head and
//! tail ([`Captured::pieces`]), or the chunks a running gate's live log holds so far. A follower
//! says where it is ("after byte X") and gets what it has not seen: the bytes from X on, with the
//! same marker [`Captured::to_bytes`] writes wherever bytes were cut, and the offset to ask from
//! next. Read from 0, a finished log's slice is exactly its artifact's bytes, so a follower that
//! joined at the start ends up with what a download gives.

use crate::Captured;

/// What a follower at `from` has not seen yet.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LogSlice {
    /// The offset in the original stream the slice starts at (the one asked for, or the stream's
    /// length when asked past its end).
    pub from: u64,
    /// The offset to ask from next: just after the last byte of the stream in `bytes`.
    pub next: u64,
    /// Bytes of the stream between `from` and `next` that were not kept (each gap is a marker in
    /// `bytes`).
    pub cut: u64,
    /// The stream's bytes from `from` to `next`, with a marker in place of each gap.
    pub bytes: Vec<u8>,
}

/// Reads `pieces` (offset in the original stream, bytes; in order, not overlapping) from `from`,
/// at most `limit` bytes of the stream. Unless the stream has `ended`, a multi-byte UTF-8
/// character still being written is held back whole, so a slice read as text never splits one.
pub fn slice_after<'a>(
    pieces: impl IntoIterator<Item = (u64, &'a [u8])>,
    total: u64,
    from: u64,
    limit: usize,
    ended: bool,
) -> LogSlice {
    let from = from.min(total);
    let mut cursor = from;
    let mut out = Vec::new();
    let mut cut = 0u64;
    let mut taken = 0usize;
    // The byte before a gap decides whether the marker needs a line of its own first, as
    // `Captured::to_bytes` does.
    let mut last_byte: Option<u8> = None;
    for (start, bytes) in pieces {
        let end = start + bytes.len() as u64;
        if bytes.is_empty() || end <= cursor {
            last_byte = bytes.last().copied().or(last_byte);
            continue;
        }
        if taken >= limit {
            break;
        }
        if start > cursor {
            let gap = start - cursor;
            cut += gap;
            if last_byte.is_some_and(|b| b != b'\n') {
                out.push(b'\n');
            }
            out.extend_from_slice(Captured::marker(gap).as_bytes());
            cursor = start;
        }
        let skip = usize::try_from(cursor - start).unwrap_or(usize::MAX);
        let available = &bytes[skip.min(bytes.len())..];
        let take = available.len().min(limit - taken);
        out.extend_from_slice(&available[..take]);
        taken += take;
        cursor += take as u64;
        last_byte = bytes.last().copied();
        if take < available.len() {
            break;
        }
    }
    // A gap at the very end (bytes cut after the last piece kept) is reported once the stream has
    // ended; while it runs the next flush brings the bytes.
    let cut_short = taken >= limit && cursor < total;
    if !ended || cut_short {
        let held = incomplete_utf8_suffix(&out);
        out.truncate(out.len() - held);
        cursor -= held as u64;
    }
    LogSlice {
        from,
        next: cursor,
        cut,
        bytes: out,
    }
}

/// Bytes at the end of `bytes` that begin a UTF-8 character not yet complete.
fn incomplete_utf8_suffix(bytes: &[u8]) -> usize {
    // Look back at most 3 bytes for the lead byte of the last character.
    for back in 1..=bytes.len().min(3) {
        let byte = bytes[bytes.len() - back];
        if byte & 0b1100_0000 == 0b1000_0000 {
            continue; // a continuation byte: keep looking for the lead
        }
        let needs = match byte {
            0xC0..=0xDF => 2,
            0xE0..=0xEF => 3,
            0xF0..=0xF7 => 4,
            _ => return 0, // ASCII or not UTF-8: nothing to wait for
        };
        return if back < needs { back } else { 0 };
    }
    0
}

impl Captured {
    /// The kept bytes as pieces of the original stream: the head at 0, the tail after the cut.
    pub fn pieces(&self) -> [(u64, &[u8]); 2] {
        [
            (0, self.head.as_slice()),
            (self.head.len() as u64 + self.cut, self.tail.as_slice()),
        ]
    }

    /// Takes apart what [`Captured::to_bytes`] wrote for a stream of `original` bytes of which
    /// `cut` were cut; `None` when `bytes` cannot be that. A capture that cut anything kept its
    /// whole cap, half of it (rounded down) as the head.
    pub fn from_kept(bytes: &[u8], original: u64, cut: u64) -> Option<Captured> {
        if cut == 0 {
            return (bytes.len() as u64 == original).then(|| Captured {
                head: bytes.to_vec(),
                tail: Vec::new(),
                cut: 0,
            });
        }
        let kept = usize::try_from(original.checked_sub(cut)?).ok()?;
        let head_len = kept / 2;
        let tail_len = kept - head_len;
        let head = bytes.get(..head_len)?;
        let newline = usize::from(!head.is_empty() && !head.ends_with(b"\n"));
        let marker = Captured::marker(cut);
        if bytes.len() != kept + newline + marker.len()
            || &bytes[head_len + newline..head_len + newline + marker.len()] != marker.as_bytes()
        {
            return None;
        }
        Some(Captured {
            head: head.to_vec(),
            tail: bytes[bytes.len() - tail_len..].to_vec(),
            cut,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Capture;

    fn slice(pieces: &[(u64, &[u8])], total: u64, from: u64, ended: bool) -> LogSlice {
        slice_after(pieces.iter().copied(), total, from, usize::MAX, ended)
    }

    #[test]
    fn a_finished_log_read_from_the_start_is_its_artifact() {
        let data: Vec<u8> = (0..5_000u32)
            .flat_map(|i| format!("line {i}\n").into_bytes())
            .collect();
        for cap in [100, 1001, 100_000] {
            let captured = Captured::from_bytes(&data, cap);
            let read = slice(&captured.pieces(), data.len() as u64, 0, true);
            assert_eq!(read.bytes, captured.to_bytes(), "cap {cap}");
            assert_eq!(read.cut, captured.cut);
            assert_eq!(read.next, data.len() as u64);
            let back =
                Captured::from_kept(&captured.to_bytes(), captured.original_len(), captured.cut);
            assert_eq!(back.as_ref(), Some(&captured), "cap {cap}");
        }
    }

    #[test]
    fn a_head_without_a_newline_is_taken_apart_too() {
        let mut capture = Capture::new(10);
        capture.push(b"abcdefghijklmnopqrstuvwxyz");
        let captured = capture.finish();
        let bytes = captured.to_bytes();
        assert_eq!(
            Captured::from_kept(&bytes, 26, captured.cut),
            Some(captured)
        );
        assert_eq!(Captured::from_kept(b"short", 26, 16), None);
    }

    #[test]
    fn a_follower_gets_only_what_it_has_not_seen() {
        let pieces: [(u64, &[u8]); 2] = [(0, b"one\ntwo\n"), (8, b"three\n")];
        let first = slice(&pieces, 14, 0, false);
        assert_eq!(first.bytes, b"one\ntwo\nthree\n");
        assert_eq!(first.next, 14);
        let again = slice(&pieces, 14, first.next, false);
        assert_eq!(again.bytes, b"");
        assert_eq!(again.next, 14);
        let middle = slice(&pieces, 14, 4, false);
        assert_eq!(middle.bytes, b"two\nthree\n");
        // Asked past the end: nothing, from the end.
        let past = slice(&pieces, 14, 99, false);
        assert_eq!((past.from, past.next, past.bytes.len()), (14, 14, 0));
    }

    #[test]
    fn gaps_are_markers_and_counted() {
        let pieces: [(u64, &[u8]); 2] = [(0, b"head"), (104, b"tail\n")];
        let read = slice(&pieces, 109, 0, false);
        assert_eq!(read.cut, 100);
        let text = String::from_utf8(read.bytes).unwrap();
        assert!(text.starts_with("head\n\n[... 100 bytes cut"), "{text}");
        assert!(text.ends_with("...]\n\ntail\n"), "{text}");
        // A follower inside the gap is told how much it missed.
        let inside = slice(&pieces, 109, 50, false);
        assert_eq!(inside.cut, 54);
        assert!(
            String::from_utf8(inside.bytes)
                .unwrap()
                .contains("54 bytes cut")
        );
    }

    #[test]
    fn a_character_being_written_is_held_back_until_whole() {
        let euro = "€".as_bytes(); // three bytes
        let mut stream = b"price: ".to_vec();
        stream.extend_from_slice(&euro[..2]);
        let pieces = [(0, stream.as_slice())];
        let read = slice(&pieces, stream.len() as u64, 0, false);
        assert_eq!(read.bytes, b"price: ");
        assert_eq!(read.next, 7);
        // Ended, nothing more will come: the stray bytes are given as they are.
        let read = slice(&pieces, stream.len() as u64, 0, true);
        assert_eq!(read.bytes.len(), 9);
    }

    #[test]
    fn a_limit_cuts_the_read_short_and_next_resumes() {
        let pieces: [(u64, &[u8]); 1] = [(0, b"0123456789")];
        let read = slice_after(pieces, 10, 2, 3, true);
        assert_eq!((read.bytes.as_slice(), read.next), (&b"234"[..], 5));
        let read = slice_after(pieces, 10, read.next, 100, true);
        assert_eq!((read.bytes.as_slice(), read.next), (&b"56789"[..], 10));
    }
}
