//! Cron math: when a schedule fires, in a real time zone. Pure: no clock, no store.
//!
//! Expressions are parsed with croner as crontab reads them: 5 fields, or 6/7 with seconds first
//! and a year last; Sunday is 0 or 7; when both day-of-month and day-of-week are restricted, a day
//! matching either fires (crontab's OR, not Quartz's AND).
//!
//! Daylight-saving changes follow the Vixie cron rules, which croner implements for zoned times:
//! a fixed-time job (single values for second, minute and hour) whose local time falls in a skipped
//! hour runs right after the gap, once; in a repeated hour it runs once, at the first occurrence;
//! interval and wildcard jobs (`*/15 * * * *`, `30 * * * *`) follow real time, so they fire in
//! both passes of a repeated hour and not at all in a skipped one. The table tests below pin each
//! rule in several zones, so a croner upgrade that changed them would fail here.

use crate::{Error, Result};
use chrono::{DateTime, SecondsFormat, TimeZone, Utc};
use chrono_tz::Tz;
use croner::Cron;
use croner::parser::{CronParser, Seconds, Year};

/// How many fire times `preview` prints by default.
pub const DEFAULT_PREVIEW_COUNT: usize = 5;

/// A parsed cron expression in a time zone.
#[derive(Debug, Clone)]
pub struct Schedule {
    expr: String,
    tz: Tz,
    cron: Cron,
}

/// Parses an IANA time zone name, with an error that says what is expected.
pub fn parse_timezone(zone: &str) -> Result<Tz> {
    zone.trim()
        .parse::<Tz>()
        .map_err(|_| Error::UnknownTimeZone {
            zone: zone.to_owned(),
        })
}

/// croner as crontab reads: optional seconds first, optional year last.
pub(crate) fn parser() -> CronParser {
    CronParser::builder()
        .seconds(Seconds::Optional)
        .year(Year::Optional)
        .build()
}

impl Schedule {
    /// Parses `expr` for the zone `timezone` (an IANA name such as `Europe/Berlin`).
    pub fn parse(expr: &str, timezone: &str) -> Result<Schedule> {
        let tz = parse_timezone(timezone)?;
        let trimmed = expr.trim();
        let fields = trimmed.split_whitespace().count();
        let bad = |message: String| Error::BadSchedule {
            expr: expr.to_owned(),
            message,
        };
        // croner also takes nicknames such as @daily; anything else must have 5 to 7 fields, which
        // we check first so the message says what users most often get wrong.
        if !trimmed.starts_with('@') && !(5..=7).contains(&fields) {
            return Err(bad(format!(
                "{fields} field{} given; use 5 fields (minute hour day-of-month month day-of-week), \
                 or 6/7 with seconds first and a year last",
                if fields == 1 { "" } else { "s" }
            )));
        }
        let cron = parser().parse(trimmed).map_err(|e| bad(e.to_string()))?;
        Ok(Schedule {
            expr: trimmed.to_owned(),
            tz,
            cron,
        })
    }

    pub fn expr(&self) -> &str {
        &self.expr
    }

    pub fn timezone(&self) -> Tz {
        self.tz
    }

    /// The first fire time strictly after `after` (Unix milliseconds), or `None` if there is none.
    pub fn next_after(&self, after: i64) -> Option<i64> {
        // Slots are whole seconds. Truncating `after` to its second and asking for the next
        // occurrence strictly after that second gives the first slot > `after` either way.
        let start = self
            .tz
            .timestamp_millis_opt(after.div_euclid(1000) * 1000)
            .single()?;
        self.cron
            .find_next_occurrence(&start, false)
            .ok()
            .map(|t| t.timestamp_millis())
    }

    /// Up to `count` fire times strictly after `after`.
    pub fn upcoming(&self, after: i64, count: usize) -> Vec<i64> {
        let mut times = Vec::with_capacity(count);
        let mut cursor = after;
        while times.len() < count {
            match self.next_after(cursor) {
                Some(next) => {
                    times.push(next);
                    cursor = next;
                }
                None => break,
            }
        }
        times
    }

    /// The first fire time after `after`, or an error saying the schedule never fires again.
    pub fn require_next_after(&self, after: i64) -> Result<i64> {
        self.next_after(after).ok_or_else(|| Error::NeverFires {
            expr: self.expr.clone(),
            after: orchestrator_types::format_millis(after),
        })
    }

    /// `instant` as local time in the schedule's zone, with its offset: `2026-11-23T03:00:00+01:00`.
    pub fn local_label(&self, instant: i64) -> String {
        match DateTime::<Utc>::from_timestamp_millis(instant) {
            Some(t) => t
                .with_timezone(&self.tz)
                .to_rfc3339_opts(SecondsFormat::Secs, false),
            None => format!("@{instant}ms"),
        }
    }
}

/// The stable jitter of an automation: an offset in `[0, jitter_secs)` seconds (in milliseconds)
/// derived from its name, so it is the same on every node and after every restart, and different
/// automations on the same minute spread out.
pub fn jitter_offset_ms(name: &str, jitter_secs: u64) -> i64 {
    if jitter_secs == 0 {
        return 0;
    }
    // FNV-1a: tiny, stable across Rust versions (unlike `DefaultHasher`), good enough to spread.
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in name.bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    (hash % (jitter_secs * 1000)) as i64
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::DateTime;
    use proptest::prelude::*;

    /// A cron field and the values it matches: `*`, `*/step`, a value, a range or a list.
    fn field(low: u32, high: u32) -> impl Strategy<Value = (String, Vec<u32>)> {
        let all = move || (low..=high).collect::<Vec<u32>>();
        prop_oneof![
            Just(("*".to_owned(), all())),
            (2..=6u32).prop_map(move |step| (
                format!("*/{step}"),
                all()
                    .into_iter()
                    .filter(|v| (v - low).is_multiple_of(step))
                    .collect()
            )),
            (low..=high).prop_map(|v| (v.to_string(), vec![v])),
            (low..=high, low..=high).prop_map(|(a, b)| {
                let (a, b) = (a.min(b), a.max(b));
                (format!("{a}-{b}"), (a..=b).collect())
            }),
            (low..=high, low..=high).prop_map(|(a, b)| {
                let mut values = vec![a, b];
                values.sort_unstable();
                values.dedup();
                (format!("{a},{b}"), values)
            }),
        ]
    }

    /// Whether a UTC minute matches, by crontab's rules: when both day fields are restricted a
    /// day matching either fires.
    fn matches(
        t: DateTime<Utc>,
        fields: &[(String, Vec<u32>); 4],
        dow: &(String, Vec<u32>),
    ) -> bool {
        use chrono::{Datelike, Timelike};
        let [minute, hour, dom, month] = fields;
        let day_of_month = dom.1.contains(&t.day());
        let day_of_week = dow.1.contains(&t.weekday().num_days_from_sunday());
        let day = match (dom.0 == "*", dow.0 == "*") {
            (true, true) => true,
            (false, true) => day_of_month,
            (true, false) => day_of_week,
            (false, false) => day_of_month || day_of_week,
        };
        minute.1.contains(&t.minute())
            && hour.1.contains(&t.hour())
            && month.1.contains(&t.month())
            && day
    }

    proptest! {
        // `PROPTEST_CASES` runs more (`just fuzz`).
        #![proptest_config(ProptestConfig::with_cases(
            std::env::var("PROPTEST_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(64)
        ))]

        /// In UTC, the next fire time is the first minute a brute-force scan finds, and the fire
        /// times that follow it are strictly increasing.
        #[test]
        fn next_after_agrees_with_a_minute_scan(
            minute in field(0, 59),
            hour in field(0, 23),
            dom in field(1, 31),
            dow in field(0, 6),
            after in 1_700_000_000_000i64..1_900_000_000_000i64,
        ) {
            let month = ("*".to_owned(), (1..=12).collect::<Vec<u32>>());
            let expr = format!("{} {} {} {} {}", minute.0, hour.0, dom.0, month.0, dow.0);
            let schedule = Schedule::parse(&expr, "UTC").unwrap();
            let fields = [minute, hour, dom, month];
            let mut t = after.div_euclid(60_000) * 60_000 + 60_000;
            let expected = loop {
                let at = DateTime::<Utc>::from_timestamp_millis(t).unwrap();
                if matches(at, &fields, &dow) {
                    break t;
                }
                t += 60_000;
                prop_assert!(t - after < 400 * 24 * 3_600_000, "no fire time within 400 days");
            };
            prop_assert_eq!(schedule.next_after(after), Some(expected), "{}", expr);
            let times = schedule.upcoming(after, 10);
            prop_assert!(times.windows(2).all(|w| w[0] < w[1]), "{:?}", times);
        }

        /// In zones with daylight-saving changes, fire times stay strictly increasing across them.
        #[test]
        fn fire_times_increase_across_daylight_saving(
            minute in field(0, 59),
            hour in field(0, 23),
            zone in prop::sample::select(vec!["Europe/Berlin", "America/New_York", "Australia/Lord_Howe"]),
            after in 1_700_000_000_000i64..1_900_000_000_000i64,
        ) {
            let expr = format!("{} {} * * *", minute.0, hour.0);
            let schedule = Schedule::parse(&expr, zone).unwrap();
            let times = schedule.upcoming(after, 60);
            prop_assert!(!times.is_empty());
            prop_assert!(times[0] > after);
            prop_assert!(times.windows(2).all(|w| w[0] < w[1]), "{} {}: {:?}", expr, zone, times);
        }
    }

    fn ms(rfc3339: &str) -> i64 {
        DateTime::parse_from_rfc3339(rfc3339)
            .unwrap()
            .timestamp_millis()
    }

    fn utc(instant: i64) -> String {
        orchestrator_types::format_millis(instant)
    }

    /// Fire times after `from` (an RFC 3339 instant), as local RFC 3339 labels in the zone.
    fn fires(expr: &str, zone: &str, from: &str, count: usize) -> Vec<String> {
        let schedule = Schedule::parse(expr, zone).unwrap();
        schedule
            .upcoming(ms(from), count)
            .into_iter()
            .map(|t| schedule.local_label(t))
            .collect()
    }

    struct Case {
        what: &'static str,
        expr: &'static str,
        zone: &'static str,
        from: &'static str,
        expect: &'static [&'static str],
    }

    /// Daylight-saving changes, zone by zone. Each expected list is local time with its offset, so
    /// a fold shows as the same wall time twice with two offsets.
    const DST_CASES: &[Case] = &[
        // America/New_York: 2026-03-08 02:00 EST -> 03:00 EDT; 2026-11-01 02:00 EDT -> 01:00 EST.
        Case {
            what: "New York gap, fixed time in the gap runs right after it, once",
            expr: "30 2 * * *",
            zone: "America/New_York",
            from: "2026-03-07T00:00:00-05:00",
            expect: &[
                "2026-03-07T02:30:00-05:00",
                "2026-03-08T03:00:00-04:00",
                "2026-03-09T02:30:00-04:00",
            ],
        },
        Case {
            what: "New York fold, fixed time in the repeated hour runs once",
            expr: "30 1 * * *",
            zone: "America/New_York",
            from: "2026-10-31T00:00:00-04:00",
            expect: &[
                "2026-10-31T01:30:00-04:00",
                "2026-11-01T01:30:00-04:00",
                "2026-11-02T01:30:00-05:00",
            ],
        },
        Case {
            what: "New York fold, interval job follows real time through both passes",
            expr: "*/30 * * * *",
            zone: "America/New_York",
            from: "2026-11-01T00:45:00-04:00",
            expect: &[
                "2026-11-01T01:00:00-04:00",
                "2026-11-01T01:30:00-04:00",
                "2026-11-01T01:00:00-05:00",
                "2026-11-01T01:30:00-05:00",
                "2026-11-01T02:00:00-05:00",
            ],
        },
        Case {
            what: "New York gap, wildcard hour skips the missing hour",
            expr: "15 * * * *",
            zone: "America/New_York",
            from: "2026-03-08T00:30:00-05:00",
            expect: &[
                "2026-03-08T01:15:00-05:00",
                "2026-03-08T03:15:00-04:00",
                "2026-03-08T04:15:00-04:00",
            ],
        },
        // Europe/Berlin: 2026-03-29 02:00 CET -> 03:00 CEST; 2026-10-25 03:00 CEST -> 02:00 CET.
        Case {
            what: "Berlin gap, fixed time runs right after it",
            expr: "30 2 * * *",
            zone: "Europe/Berlin",
            from: "2026-03-28T12:00:00+01:00",
            expect: &["2026-03-29T03:00:00+02:00", "2026-03-30T02:30:00+02:00"],
        },
        Case {
            what: "Berlin fold, fixed time once at the first pass",
            expr: "30 2 * * *",
            zone: "Europe/Berlin",
            from: "2026-10-24T12:00:00+02:00",
            expect: &["2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00"],
        },
        Case {
            what: "Berlin weekday nightly across the autumn change keeps 03:00 local",
            expr: "0 3 * * 1-5",
            zone: "Europe/Berlin",
            from: "2026-10-22T12:00:00+02:00",
            expect: &[
                "2026-10-23T03:00:00+02:00",
                "2026-10-26T03:00:00+01:00",
                "2026-10-27T03:00:00+01:00",
            ],
        },
        Case {
            what: "Berlin fold, every 20 minutes in real time",
            expr: "*/20 2 * * *",
            zone: "Europe/Berlin",
            from: "2026-10-25T01:59:00+02:00",
            expect: &[
                "2026-10-25T02:00:00+02:00",
                "2026-10-25T02:20:00+02:00",
                "2026-10-25T02:40:00+02:00",
                "2026-10-25T02:00:00+01:00",
                "2026-10-25T02:20:00+01:00",
                "2026-10-25T02:40:00+01:00",
                "2026-10-26T02:00:00+01:00",
            ],
        },
        // Australia/Lord_Howe moves by 30 minutes: 2026-04-05 02:00 +11 -> 01:30 +10:30;
        // 2026-10-04 02:00 +10:30 -> 02:30 +11.
        Case {
            what: "Lord Howe half-hour gap, fixed time in it runs at its end",
            expr: "15 2 * * *",
            zone: "Australia/Lord_Howe",
            from: "2026-10-03T12:00:00+10:30",
            expect: &["2026-10-04T02:30:00+11:00", "2026-10-05T02:15:00+11:00"],
        },
        Case {
            what: "Lord Howe half-hour fold, fixed time once",
            expr: "45 1 * * *",
            zone: "Australia/Lord_Howe",
            from: "2026-04-04T12:00:00+11:00",
            expect: &["2026-04-05T01:45:00+11:00", "2026-04-06T01:45:00+10:30"],
        },
        Case {
            what: "Lord Howe half-hour fold, interval job runs through both passes",
            expr: "*/15 1 * * *",
            zone: "Australia/Lord_Howe",
            from: "2026-04-05T01:40:00+11:00",
            expect: &[
                "2026-04-05T01:45:00+11:00",
                "2026-04-05T01:30:00+10:30",
                "2026-04-05T01:45:00+10:30",
                "2026-04-06T01:00:00+10:30",
            ],
        },
        // America/Santiago changes at midnight: 2026-09-06 00:00 -04 -> 01:00 -03 (midnight does not
        // exist that day); 2026-04-05 00:00 -03 -> 23:00 -04 on the 4th (23:xx happens twice).
        Case {
            what: "Santiago midnight gap, a midnight job runs at 01:00",
            expr: "0 0 * * *",
            zone: "America/Santiago",
            from: "2026-09-05T12:00:00-04:00",
            expect: &["2026-09-06T01:00:00-03:00", "2026-09-07T00:00:00-03:00"],
        },
        Case {
            what: "Santiago midnight fold, 23:30 once",
            expr: "30 23 * * *",
            zone: "America/Santiago",
            from: "2026-04-04T12:00:00-03:00",
            expect: &["2026-04-04T23:30:00-03:00", "2026-04-05T23:30:00-04:00"],
        },
        Case {
            what: "Santiago midnight fold, hourly wildcard follows real time",
            expr: "0 * * * *",
            zone: "America/Santiago",
            from: "2026-04-04T22:30:00-03:00",
            expect: &[
                "2026-04-04T23:00:00-03:00",
                "2026-04-04T23:00:00-04:00",
                "2026-04-05T00:00:00-04:00",
            ],
        },
    ];

    #[test]
    fn daylight_saving_changes_follow_vixie_rules() {
        let mut failures = Vec::new();
        for case in DST_CASES {
            let got = fires(case.expr, case.zone, case.from, case.expect.len());
            if got != case.expect {
                failures.push(format!(
                    "{}\n  {} in {} from {}\n  expected {:?}\n  got      {:?}",
                    case.what, case.expr, case.zone, case.from, case.expect, got
                ));
            }
        }
        assert!(failures.is_empty(), "\n{}", failures.join("\n"));
    }

    #[test]
    fn syntax_as_crontab_users_write_it() {
        let cases: &[(&str, &str, &[&str])] = &[
            // Sunday is 0 and 7.
            (
                "0 9 * * 0",
                "2026-11-16T00:00:00Z",
                &["2026-11-22T09:00:00Z"],
            ),
            (
                "0 9 * * 7",
                "2026-11-16T00:00:00Z",
                &["2026-11-22T09:00:00Z"],
            ),
            (
                "0 9 * * sun",
                "2026-11-16T00:00:00Z",
                &["2026-11-22T09:00:00Z"],
            ),
            // Day-of-month OR day-of-week: the 1st, and every Monday.
            (
                "0 0 1 * 1",
                "2026-11-28T00:00:00Z",
                &[
                    "2026-11-30T00:00:00Z",
                    "2026-12-01T00:00:00Z",
                    "2026-12-07T00:00:00Z",
                ],
            ),
            // Six fields: seconds first.
            (
                "*/20 * * * * *",
                "2026-11-22T00:00:00Z",
                &["2026-11-22T00:00:20Z", "2026-11-22T00:00:40Z"],
            ),
            // Seven fields: a year last.
            (
                "0 0 12 1 1 * 2030",
                "2026-11-22T00:00:00Z",
                &["2030-01-01T12:00:00Z"],
            ),
            ("@hourly", "2026-11-22T00:10:00Z", &["2026-11-22T01:00:00Z"]),
        ];
        for (expr, from, expect) in cases {
            let got: Vec<String> = Schedule::parse(expr, "UTC")
                .unwrap()
                .upcoming(ms(from), expect.len())
                .into_iter()
                .map(|t| utc(t).replace(".000", ""))
                .collect();
            assert_eq!(&got, expect, "{expr}");
        }
    }

    #[test]
    fn next_after_is_strict_and_ignores_milliseconds() {
        let s = Schedule::parse("0 * * * *", "UTC").unwrap();
        let slot = ms("2026-11-22T01:00:00Z");
        assert_eq!(s.next_after(slot - 1), Some(slot));
        assert_eq!(s.next_after(slot), Some(slot + 3_600_000));
        assert_eq!(s.next_after(slot + 500), Some(slot + 3_600_000));
    }

    #[test]
    fn bad_input_names_the_problem() {
        let cases: &[(&str, &str, &str)] = &[
            ("0 3 * *", "UTC", "4 fields given"),
            ("61 * * * *", "UTC", "invalid schedule"),
            (
                "0 3 * * 1-5",
                "Europe/Berlinn",
                "unknown time zone \"Europe/Berlinn\"",
            ),
            ("0 3 * * mon-fry", "UTC", "invalid schedule"),
            ("", "UTC", "0 fields"),
        ];
        for (expr, zone, word) in cases {
            let err = Schedule::parse(expr, zone).unwrap_err().to_string();
            assert!(err.contains(word), "{expr} {zone}: {err}");
        }
        let never = Schedule::parse("0 0 30 2 *", "UTC");
        if let Ok(s) = never {
            assert!(s.require_next_after(0).is_err());
        }
    }

    #[test]
    fn jitter_is_stable_and_bounded() {
        assert_eq!(jitter_offset_ms("nightly", 0), 0);
        let a = jitter_offset_ms("nightly", 300);
        assert_eq!(a, jitter_offset_ms("nightly", 300));
        assert!((0..300_000).contains(&a));
        let spread: std::collections::HashSet<i64> = (0..100)
            .map(|i| jitter_offset_ms(&format!("job-{i}"), 60) / 1000)
            .collect();
        assert!(spread.len() > 30, "{spread:?}");
    }
}
