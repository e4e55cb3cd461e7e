//! File helpers shared by the file tools: text detection, line endings, base64. (Atomic writes
//! go through the workspace's descriptor: see beneath.rs.)

/// True when a sample looks binary: a NUL byte, or more than 30% of it neither valid UTF-8 text nor
/// common whitespace. The last few bytes may be a character cut by the sample's end, so an incomplete
/// sequence at the very end does not count.
pub(crate) fn looks_binary(sample: &[u8]) -> bool {
    if sample.is_empty() {
        return false;
    }
    if memchr_nul(sample) {
        return true;
    }
    let mut bad = 0usize;
    let mut chunks = sample.utf8_chunks().peekable();
    while let Some(chunk) = chunks.next() {
        bad += chunk
            .valid()
            .bytes()
            .filter(|b| *b < 0x20 && !matches!(b, b'\t' | b'\n' | b'\r' | 0x0c | 0x1b | 0x08))
            .count();
        let invalid = chunk.invalid().len();
        if chunks.peek().is_some() || invalid > 0 && sample.len() < 4 {
            bad += invalid;
        }
    }
    bad * 10 > sample.len() * 3
}

fn memchr_nul(s: &[u8]) -> bool {
    s.contains(&0)
}

/// The line ending a text predominantly uses.
pub(crate) fn is_crlf(text: &str) -> bool {
    let crlf = text.matches("\r\n").count();
    let lf = text.matches('\n').count();
    crlf > 0 && crlf * 2 >= lf
}

/// Converts a text written with `\n` (or mixed) to the file's line ending.
pub(crate) fn to_eol(text: &str, crlf: bool) -> String {
    let lf = text.replace("\r\n", "\n");
    if crlf { lf.replace('\n', "\r\n") } else { lf }
}

const B64: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with padding (images for the model); small enough not to need a crate.
pub(crate) fn base64(data: &[u8]) -> String {
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        out.push(B64[(n >> 18) as usize & 63] as char);
        out.push(B64[(n >> 12) as usize & 63] as char);
        out.push(if chunk.len() > 1 {
            B64[(n >> 6) as usize & 63] as char
        } else {
            '='
        });
        out.push(if chunk.len() > 2 {
            B64[n as usize & 63] as char
        } else {
            '='
        });
    }
    out
}

/// A human size: 512 B, 1.5 KB, 2.0 MB, 2.0 GB.
pub(crate) fn human_size(n: u64) -> String {
    const UNITS: [&str; 4] = ["KB", "MB", "GB", "TB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut v = n as f64 / 1024.0;
    let mut unit = 0;
    while v >= 1024.0 && unit < UNITS.len() - 1 {
        v /= 1024.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn helpers() {
        assert_eq!(base64(b"Man"), "TWFu");
        assert_eq!(base64(b"Ma"), "TWE=");
        assert_eq!(base64(b"M"), "TQ==");
        assert!(looks_binary(b"abc\0def"));
        assert!(!looks_binary("héllo wörld ✅\n".as_bytes()));
        assert!(looks_binary(&[
            0xff, 0xfe, 0x81, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87, b'a'
        ]));
        assert!(is_crlf("a\r\nb\r\n"));
        assert!(!is_crlf("a\nb\n"));
        assert_eq!(to_eol("a\nb\r\n", true), "a\r\nb\r\n");
        assert_eq!(human_size(1536), "1.5 KB");
    }
}
