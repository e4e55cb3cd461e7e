//! An incremental parser for server-sent events, the framing of a streamed Chat Completions reply.
//!
//! The network hands us arbitrary slices of the byte stream: an event may be split anywhere,
//! including between the `\r` and `\n` of a line ending or inside a multi-byte character, and one
//! slice may hold many events. So the parser keeps the unfinished line as bytes and decodes only
//! whole lines. A model's stream needs only the `data` fields ([`SseParser::push`]); the daemon's
//! own streams, followed by the CLI, also name their events and number them
//! ([`SseParser::push_events`]). Comments (`:` lines, which some providers send as keep-alives)
//! and `retry` are skipped.

/// A line longer than this is refused rather than buffered without end: no honest chunk of a
/// model reply comes near it, so it means the server is not speaking SSE.
pub(crate) const MAX_LINE_BYTES: usize = 16 * 1024 * 1024;

/// One complete event.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SseEvent {
    /// Its `event` field: its name, where the stream names them.
    pub event: Option<String>,
    /// Its `id` field, when it carried one (a reconnecting client sends the last as
    /// `Last-Event-ID`).
    pub id: Option<String>,
    pub data: String,
}

/// Turns bytes into complete events.
#[derive(Debug, Default)]
pub struct SseParser {
    /// Bytes of a line whose end has not arrived yet.
    pending: Vec<u8>,
    /// Data lines of the event being read, joined by `\n` as the SSE specification says.
    data: Option<String>,
    /// The `event` and `id` fields of the event being read.
    event: Option<String>,
    id: Option<String>,
    /// The last byte seen was a `\r`; a `\n` that follows belongs to the same line ending.
    after_cr: bool,
}

impl SseParser {
    /// Feeds the next slice of the stream; returns the data of every event it completed.
    pub fn push(&mut self, bytes: &[u8]) -> Result<Vec<String>, String> {
        Ok(self
            .push_events(bytes)?
            .into_iter()
            .map(|event| event.data)
            .collect())
    }

    /// Feeds the next slice of the stream; returns every event it completed, whole.
    pub fn push_events(&mut self, bytes: &[u8]) -> Result<Vec<SseEvent>, String> {
        let mut events = Vec::new();
        let mut rest = bytes;
        // An empty slice between the `\r` and the `\n` of a line ending leaves the `\r` pending.
        if self.after_cr && !rest.is_empty() {
            self.after_cr = false;
            if let Some(b'\n') = rest.first() {
                rest = &rest[1..];
            }
        }
        while let Some(end) = rest.iter().position(|&b| b == b'\n' || b == b'\r') {
            self.pending.extend_from_slice(&rest[..end]);
            let terminator = rest[end];
            rest = &rest[end + 1..];
            if terminator == b'\r' {
                match rest.first() {
                    Some(b'\n') => rest = &rest[1..],
                    // The `\n` of a CRLF may be the first byte of the next slice.
                    None => self.after_cr = true,
                    Some(_) => {}
                }
            }
            let line = std::mem::take(&mut self.pending);
            if let Some(event) = self.line(&line) {
                events.push(event);
            }
        }
        self.pending.extend_from_slice(rest);
        if self.pending.len() > MAX_LINE_BYTES {
            return Err(format!(
                "a server-sent event line is longer than {MAX_LINE_BYTES} bytes"
            ));
        }
        Ok(events)
    }

    /// Ends the stream: an event whose closing blank line never came is still returned, because
    /// some servers close the connection right after the last `data:` line.
    pub fn finish(&mut self) -> Option<String> {
        self.finish_event().map(|event| event.data)
    }

    /// [`SseParser::finish`], with the event whole.
    pub fn finish_event(&mut self) -> Option<SseEvent> {
        let line = std::mem::take(&mut self.pending);
        if !line.is_empty()
            && let Some(event) = self.line(&line)
        {
            return Some(event);
        }
        self.dispatch()
    }

    /// The event read so far, if it has data (one without is not dispatched, as in browsers).
    fn dispatch(&mut self) -> Option<SseEvent> {
        let (event, id) = (self.event.take(), self.id.take());
        self.data.take().map(|data| SseEvent { event, id, data })
    }

    fn line(&mut self, line: &[u8]) -> Option<SseEvent> {
        if line.is_empty() {
            return self.dispatch();
        }
        if line[0] == b':' {
            return None;
        }
        // Providers send UTF-8; a stray invalid byte becomes U+FFFD instead of losing the event.
        let line = String::from_utf8_lossy(line);
        let (field, value) = match line.split_once(':') {
            Some((field, value)) => (field, value.strip_prefix(' ').unwrap_or(value)),
            None => (line.as_ref(), ""),
        };
        match field {
            "data" => match &mut self.data {
                Some(data) => {
                    data.push('\n');
                    data.push_str(value);
                }
                None => self.data = Some(value.to_owned()),
            },
            "event" => self.event = Some(value.to_owned()),
            // An id with a NUL is ignored, as the specification says.
            "id" if !value.contains('\0') => self.id = Some(value.to_owned()),
            _ => {}
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// One event of a generated stream: its data lines, the comments and fields before them.
    fn event() -> impl Strategy<Value = (Vec<String>, bool, bool)> {
        (
            prop::collection::vec("[^\r\n]{0,40}", 1..4),
            any::<bool>(),
            any::<bool>(),
        )
    }

    /// Found by the property test below: an empty slice between the `\r` and the `\n` of a CRLF
    /// took the `\n` for a blank line, which ended the event early.
    #[test]
    fn an_empty_slice_inside_a_crlf_keeps_the_event_whole() {
        let stream = b"data: a\r\ndata: b\r\n\r\n";
        assert_eq!(parse_in_pieces(stream, &[8, 8]), ["a\nb"]);
    }

    proptest! {
        // `PROPTEST_CASES` runs more (`just fuzz`).
        #![proptest_config(ProptestConfig::with_cases(
            std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(256)
        ))]

        /// Any stream of events, with any line endings, comments and other fields, split at any
        /// points, gives the same data as when it arrives whole.
        #[test]
        fn any_split_of_a_stream_gives_the_same_events(
            events in prop::collection::vec(event(), 0..6),
            ending in prop::sample::select(vec!["\n", "\r\n", "\r"]),
            cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..8),
        ) {
            let mut stream = String::new();
            let mut expected = Vec::new();
            for (lines, comment, field) in &events {
                if *comment {
                    stream.push_str(&format!(": keep-alive{ending}"));
                }
                if *field {
                    stream.push_str(&format!("event: message{ending}"));
                }
                for line in lines {
                    stream.push_str(&format!("data: {line}{ending}"));
                }
                stream.push_str(ending);
                // `data: ` loses the one space after its colon, as the specification says.
                expected.push(lines.join("\n"));
            }
            let bytes = stream.as_bytes();
            let mut points: Vec<usize> = cuts.iter().map(|i| i.index(bytes.len() + 1)).collect();
            points.sort_unstable();
            prop_assert_eq!(parse_in_pieces(bytes, &[]), expected.clone());
            prop_assert_eq!(parse_in_pieces(bytes, &points), expected);
        }
    }

    /// The daemon's own streams name and number their events; an event without data is not
    /// dispatched and leaves nothing behind for the next.
    #[test]
    fn events_keep_their_names_and_ids() {
        let mut parser = SseParser::default();
        let mut events = parser
            .push_events(b"id: 7\nevent: message\ndata: {}\n\nevent: ghost\n\nevent: de")
            .unwrap();
        events.extend(parser.push_events(b"lta\ndata: a\ndata: b\n").unwrap());
        events.extend(parser.finish_event());
        assert_eq!(
            events,
            [
                SseEvent {
                    event: Some("message".into()),
                    id: Some("7".into()),
                    data: "{}".into()
                },
                SseEvent {
                    event: Some("delta".into()),
                    id: None,
                    data: "a\nb".into()
                },
            ]
        );
    }

    fn parse_in_pieces(input: &[u8], pieces: &[usize]) -> Vec<String> {
        let mut parser = SseParser::default();
        let mut events = Vec::new();
        let mut start = 0;
        for &end in pieces.iter().chain(std::iter::once(&input.len())) {
            events.extend(parser.push(&input[start..end]).unwrap());
            start = end;
        }
        events.extend(parser.finish());
        events
    }

    const STREAM: &str = ": keep-alive\n\
        event: message\n\
        data: {\"a\":1}\n\
        \n\
        id: 7\n\
        data: {\"b\":\"é\"}\n\
        \n\
        data: first\n\
        data: second\n\
        retry: 100\n\
        \n\
        data: [DONE]\n\
        \n";

    fn expected() -> Vec<String> {
        ["{\"a\":1}", "{\"b\":\"é\"}", "first\nsecond", "[DONE]"]
            .map(String::from)
            .to_vec()
    }

    #[test]
    fn events_survive_every_split_point() {
        let bytes = STREAM.as_bytes();
        assert_eq!(parse_in_pieces(bytes, &[]), expected());
        for split in 0..=bytes.len() {
            assert_eq!(
                parse_in_pieces(bytes, &[split]),
                expected(),
                "split {split}"
            );
        }
        // One byte at a time, which also splits the two bytes of `é`.
        let every: Vec<usize> = (1..bytes.len()).collect();
        assert_eq!(parse_in_pieces(bytes, &every), expected());
    }

    #[test]
    fn crlf_and_cr_line_endings() {
        for ending in ["\r\n", "\r"] {
            let text = STREAM.replace('\n', ending);
            let bytes = text.as_bytes();
            for split in 0..=bytes.len() {
                assert_eq!(
                    parse_in_pieces(bytes, &[split]),
                    expected(),
                    "{ending:?} split {split}"
                );
            }
        }
    }

    #[test]
    fn an_unterminated_last_event_is_returned_at_the_end() {
        assert_eq!(
            parse_in_pieces(b"data: x\n\ndata: tail", &[]),
            ["x", "tail"]
        );
        assert_eq!(parse_in_pieces(b"data: tail\n", &[]), ["tail"]);
        assert!(parse_in_pieces(b": only a comment\n", &[]).is_empty());
    }

    #[test]
    fn data_without_a_space_and_without_a_value() {
        assert_eq!(parse_in_pieces(b"data:x\n\ndata\n\n", &[]), ["x", ""]);
    }

    #[test]
    fn an_endless_line_is_refused() {
        let mut parser = SseParser::default();
        let chunk = vec![b'a'; 1024 * 1024];
        let mut failed = false;
        for _ in 0..=MAX_LINE_BYTES / chunk.len() {
            if parser.push(&chunk).is_err() {
                failed = true;
                break;
            }
        }
        assert!(failed);
    }
}
