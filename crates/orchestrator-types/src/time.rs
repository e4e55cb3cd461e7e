//! Instants as the store keeps them (Unix milliseconds, UTC) and as users type them.

use crate::{Error, Result};
use chrono::{DateTime, SecondsFormat, Utc};

/// The current wall-clock time in Unix milliseconds.
pub fn now_millis() -> i64 {
    Utc::now().timestamp_millis()
}

/// RFC 3339 in UTC with milliseconds, the one format every output uses.
pub fn format_millis(millis: i64) -> String {
    DateTime::<Utc>::from_timestamp_millis(millis)
        .map(|t| t.to_rfc3339_opts(SecondsFormat::Millis, true))
        .unwrap_or_else(|| format!("@{millis}ms"))
}

/// Parses a time a user typed: an RFC 3339 instant (`2026-11-22T03:00:00+01:00`), `now`, or a delay
/// from `now` such as `90s`, `15m`, `2h`, `1d` (a leading `+` is allowed).
pub fn parse_time(input: &str, now: i64) -> Result<i64> {
    let text = input.trim();
    if text.eq_ignore_ascii_case("now") {
        return Ok(now);
    }
    if let Ok(instant) = DateTime::parse_from_rfc3339(text) {
        return Ok(instant.timestamp_millis());
    }
    let delay = text.strip_prefix('+').unwrap_or(text);
    let split = delay
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(delay.len());
    let (digits, unit) = delay.split_at(split);
    let unit_millis = match unit {
        "ms" => Some(1),
        "s" => Some(1_000),
        "m" => Some(60_000),
        "h" => Some(3_600_000),
        "d" => Some(86_400_000),
        _ => None,
    };
    match (digits.parse::<i64>(), unit_millis) {
        (Ok(n), Some(unit)) => n
            .checked_mul(unit)
            .and_then(|d| now.checked_add(d))
            .ok_or_else(|| Error::invalid("time", format!("{input:?} is too far away"))),
        _ => Err(Error::invalid(
            "time",
            format!(
                "{input:?} is not a time; use RFC 3339 (2026-11-22T03:00:00Z), `now`, or a delay like 90s, 15m, 2h, 1d"
            ),
        )),
    }
}

/// Reads a time given as Unix milliseconds or as an RFC 3339 string (what the API sends), for
/// `#[serde(deserialize_with)]`.
pub(crate) fn millis_or_rfc3339<'de, D>(deserializer: D) -> std::result::Result<i64, D::Error>
where
    D: serde::Deserializer<'de>,
{
    #[derive(serde::Deserialize)]
    #[serde(untagged)]
    enum Either {
        Millis(i64),
        Text(String),
    }
    match <Either as serde::Deserialize>::deserialize(deserializer)? {
        Either::Millis(ms) => Ok(ms),
        Either::Text(text) => DateTime::parse_from_rfc3339(&text)
            .map(|t| t.timestamp_millis())
            .map_err(|e| {
                serde::de::Error::custom(format!("{text:?} is not an RFC 3339 time: {e}"))
            }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_the_forms_users_type() {
        let now = 1_000_000;
        let cases: &[(&str, Option<i64>)] = &[
            ("now", Some(now)),
            ("90s", Some(now + 90_000)),
            ("+15m", Some(now + 900_000)),
            ("2h", Some(now + 7_200_000)),
            ("1d", Some(now + 86_400_000)),
            ("1970-01-01T00:00:01Z", Some(1_000)),
            ("1970-01-01T01:00:01+01:00", Some(1_000)),
            ("tomorrow", None),
            ("15", None),
            ("2026-13-01T00:00:00Z", None),
            ("", None),
            ("-5m", None),
        ];
        for (input, expected) in cases {
            assert_eq!(parse_time(input, now).ok(), *expected, "{input}");
        }
    }

    #[test]
    fn formats_in_utc_with_millis() {
        assert_eq!(format_millis(1_500), "1970-01-01T00:00:01.500Z");
    }
}
