//! A cron expression in plain English ("schedule in words"). Pure: text in, text out.
//!
//! `describe` parses the expression with croner exactly as `cron.rs` does (5 fields, or 6/7 with
//! seconds first and a year last; names such as MON-FRI and JAN; `@daily` and the other
//! nicknames) and then describes the sets of values croner matches, not the text, so `*/20`,
//! `0,20,40` and `0-40/20` read the same and a sentence can never disagree with the schedule.
//!
//! Wording rules:
//! - Times are 24-hour, `09:00` (or `09:00:30` when the seconds field says anything but 0).
//!   A few exact times read "at 09:00 and 17:00", prefixed "every day" when no day is restricted.
//! - Repeats read "every minute", "every 15 minutes", "every 10 seconds", "every hour, on the
//!   hour", "every hour at minute 30", "every 2 hours, on the hour". "Every N" is only used when
//!   the values start at 0 and are evenly spaced round the clock (`*/15`, not `*/7`, whose gap
//!   wraps unevenly); other progressions spell out where they start and end.
//! - Restricted hours follow a repeat as ", between 09:00 and 17:59" (one window per run of
//!   hours), or ", during hours 1, 5 and 20" when the hours do not form up to three runs.
//! - Days: "on day 1 and 15 of the month", "Monday to Friday", "on Monday and Friday", "on the
//!   last day of the month", "on the second Friday of the month", and so on. When both
//!   day-of-month and day-of-week are restricted either one fires (crontab's OR), which reads
//!   "..., or on Monday"; croner's `+` (AND) reads "..., if that day is a Monday".
//! - Months and years come last: ", in January and July", ", from March to May", ", in 2027".
//! - Anything the rules above cannot say exactly, and any invalid expression, comes back as
//!   `cron: <expr>`: an honest echo rather than a wrong sentence.

use croner::Cron;

const WEEKDAYS: [&str; 7] = [
    "Sunday",
    "Monday",
    "Tuesday",
    "Wednesday",
    "Thursday",
    "Friday",
    "Saturday",
];

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

/// At most this many exact times are listed ("at 09:00, 12:00 and 17:00") when only the hour
/// varies; beyond it the times are described as a repeat or field by field.
const MAX_LISTED_HOURS: usize = 6;
/// At most this many exact times are listed when minutes or seconds vary too.
const MAX_LISTED_TIMES: usize = 4;
/// At most this many minutes (or seconds) are listed within each hour (or minute).
const MAX_LISTED_OFFSETS: usize = 6;
/// At most this many windows of hours are spelled out as "between 09:00 and 17:59".
const MAX_WINDOWS: usize = 3;

/// Describes a cron expression in plain English, e.g. `*/5 9-17 * * 1-5` as "every 5 minutes,
/// between 09:00 and 17:59, Monday to Friday".
///
/// Never fails: an expression it cannot parse, or cannot describe exactly, comes back as
/// `cron: <expr>` (trimmed). Callers validate expressions separately.
pub fn describe(expr: &str) -> String {
    let trimmed = expr.trim();
    sentence(trimmed).unwrap_or_else(|| format!("cron: {trimmed}"))
}

/// Parses as `Schedule::parse` does: nicknames, or 5 to 7 fields with optional seconds and year.
fn parse(expr: &str) -> Option<Cron> {
    let fields = expr.split_whitespace().count();
    if !expr.starts_with('@') && !(5..=7).contains(&fields) {
        return None;
    }
    crate::cron::parser().parse(expr).ok()
}

fn sentence(expr: &str) -> Option<String> {
    let cron = parse(expr)?;
    let p = &cron.pattern;
    // L, W and # only exist for the two day fields; anywhere else we would not know what they mean.
    if [&p.seconds, &p.minutes, &p.hours, &p.months, &p.years]
        .iter()
        .any(|c| c.has_modifiers())
    {
        return None;
    }
    let seconds = p.seconds.values();
    let minutes = p.minutes.values();
    let hours = p.hours.values();
    let months = p.months.values();
    let years = p.years.values();
    // A field of bare commas parses but matches nothing: such a schedule never fires.
    if [&seconds, &minutes, &hours, &months, &years]
        .iter()
        .any(|v| v.is_empty())
    {
        return None;
    }

    let time = time_phrase(&seconds, &minutes, &hours)?;
    let days = days_phrase(expr, &cron, &months)?;

    let mut out = match (time, days.text) {
        (Time::Fixed(t), None) => format!("every day {t}"),
        (Time::Fixed(t), Some(d)) if d.starts_with("on ") => format!("{t} {d}"),
        (Time::Fixed(t), Some(d)) | (Time::Periodic(t), Some(d)) => format!("{t}, {d}"),
        (Time::Periodic(t), None) => t,
    };
    if !days.months_said
        && let Some(m) = months_phrase(&months)
    {
        out.push_str(", ");
        out.push_str(&m);
    }
    if let Some(y) = years_phrase(&years, &p.years) {
        out.push_str(", ");
        out.push_str(&y);
    }
    Some(out)
}

// ---------------------------------------------------------------------------------------------
// Time of day: seconds, minutes, hours.

/// What the time fields say: a few exact times of day, or something that repeats during the day.
#[derive(Debug)]
enum Time {
    /// "at 09:00 and 17:00": reads "every day at ..." when no day is restricted.
    Fixed(String),
    /// "every 15 minutes", "every hour, on the hour", ...
    Periodic(String),
}

fn time_phrase(s: &[u16], m: &[u16], h: &[u16]) -> Option<Time> {
    let with_seconds = s != [0];
    let at = |hour: u16, minute: u16, second: u16| {
        if with_seconds {
            format!("{hour:02}:{minute:02}:{second:02}")
        } else {
            format!("{hour:02}:{minute:02}")
        }
    };
    let (s_all, m_all, h_all) = (s.len() == 60, m.len() == 60, h.len() == 24);

    // One moment within the hour: the hours decide everything.
    if let ([second], [minute]) = (s, m) {
        let (second, minute) = (*second, *minute);
        let time = |hour: u16| at(hour, minute, second);
        if let [hour] = h {
            return Some(Time::Fixed(format!("at {}", time(*hour))));
        }
        let past = match (minute, second) {
            (0, 0) => ", on the hour".to_owned(),
            (minute, 0) => format!(" at minute {minute}"),
            (minute, second) => format!(" at minute {minute}, second {second}"),
        };
        if h_all {
            return Some(Time::Periodic(format!("every hour{past}")));
        }
        if let Some(step) = uniform_step(h, 24)
            && h.len() >= 3
        {
            return Some(Time::Periodic(format!("every {step} hours{past}")));
        }
        if h.len() <= MAX_LISTED_HOURS {
            let times: Vec<String> = h.iter().map(|&hour| time(hour)).collect();
            return Some(Time::Fixed(format!("at {}", join(&times, "and"))));
        }
        if let Some((first, step, last)) = progression(h) {
            let every = if step == 1 {
                "every hour".to_owned()
            } else {
                format!("every {step} hours")
            };
            return Some(Time::Periodic(format!(
                "{every} from {} to {}",
                time(first),
                time(last)
            )));
        }
        let windows = runs(h);
        if windows.len() <= MAX_WINDOWS && windows.iter().all(|(a, b)| b > a) {
            let spans: Vec<String> = windows
                .iter()
                .map(|&(a, b)| format!("from {} to {}", time(a), time(b)))
                .collect();
            return Some(Time::Periodic(format!(
                "every hour {}",
                join(&spans, "and")
            )));
        }
        return Some(generic_time(s, m, h));
    }

    // A few exact times.
    if !s_all && !m_all && !h_all && s.len() * m.len() * h.len() <= MAX_LISTED_TIMES {
        let mut times = Vec::new();
        for &hour in h {
            for &minute in m {
                for &second in s {
                    times.push(at(hour, minute, second));
                }
            }
        }
        return Some(Time::Fixed(format!("at {}", join(&times, "and"))));
    }

    // Something that repeats within each hour (or, with seconds, within each minute).
    let (offsets, unit, parent) = if with_seconds {
        if !m_all {
            return Some(generic_time(s, m, h));
        }
        (s, "second", "minute")
    } else {
        (m, "minute", "hour")
    };
    let Some(repeat) = repeat_phrase(offsets, unit) else {
        return Some(generic_time(s, m, h));
    };
    if h_all {
        return Some(Time::Periodic(match repeat {
            Repeat::Every(text) => text,
            Repeat::At(text) => format!("every {parent} at {text}"),
            Repeat::Span(text) => format!("{text} of every {parent}"),
        }));
    }
    let hours = hours_clause(h, with_seconds);
    Some(Time::Periodic(match repeat {
        Repeat::Every(text) => format!("{text}, {hours}"),
        Repeat::At(text) if with_seconds => format!("every minute at {text}, {hours}"),
        Repeat::At(text) => format!("at {text}, {hours}"),
        Repeat::Span(text) if with_seconds => format!("{text} of every minute, {hours}"),
        Repeat::Span(text) => format!("{text}, {hours}"),
    }))
}

/// How the minutes of an hour (or the seconds of a minute) repeat.
#[derive(Debug)]
enum Repeat {
    /// "every minute", "every 15 minutes": evenly round the whole hour, starting at 0.
    Every(String),
    /// "minutes 5 and 35": a short list.
    At(String),
    /// "every 10 minutes from minute 10 through 50": a progression covering part of the hour.
    Span(String),
}

fn repeat_phrase(values: &[u16], unit: &str) -> Option<Repeat> {
    if values.len() == 60 {
        return Some(Repeat::Every(format!("every {unit}")));
    }
    if let Some(step) = uniform_step(values, 60) {
        return Some(Repeat::Every(format!("every {step} {unit}s")));
    }
    if values.len() <= MAX_LISTED_OFFSETS {
        return Some(Repeat::At(numbered(unit, values)));
    }
    let (first, step, last) = progression(values)?;
    let every = if step == 1 {
        format!("every {unit}")
    } else {
        format!("every {step} {unit}s")
    };
    Some(Repeat::Span(format!(
        "{every} from {unit} {first} through {last}"
    )))
}

/// ", between 09:00 and 17:59" for up to three runs of hours, else "during hours 1, 5 and 20".
fn hours_clause(h: &[u16], with_seconds: bool) -> String {
    let windows = runs(h);
    if windows.len() <= MAX_WINDOWS {
        let (start, end) = if with_seconds {
            (":00:00", ":59:59")
        } else {
            (":00", ":59")
        };
        let spans: Vec<String> = windows
            .iter()
            .map(|(a, b)| format!("between {a:02}{start} and {b:02}{end}"))
            .collect();
        return join(&spans, "and");
    }
    format!("during {}", field_phrase(h, "hour", 24))
}

/// Field by field, for combinations no rule above covers: "at minutes 5 and 35 past hours 1 to 3",
/// "every second of minute 5 of every hour".
fn generic_time(s: &[u16], m: &[u16], h: &[u16]) -> Time {
    let mut text = field_phrase(m, "minute", 60);
    if s != [0] {
        text = format!("{} of {text}", field_phrase(s, "second", 60));
    }
    if h.len() == 24 {
        text.push_str(" of every hour");
    } else {
        text = format!("{text} past {}", field_phrase(h, "hour", 24));
    }
    if !text.starts_with("every ") {
        text = format!("at {text}");
    }
    Time::Periodic(text)
}

// ---------------------------------------------------------------------------------------------
// Days: day of month and day of week, with crontab's OR between them.

#[derive(Debug)]
struct Days {
    /// `None` when every day fires.
    text: Option<String>,
    /// Whether `text` already names the month ("on January 1"), so no month clause follows.
    months_said: bool,
}

/// What L, W and # add to the day-of-month field.
#[derive(Debug, Default)]
struct DomExtras {
    last_day: bool,
    last_weekday: bool,
    nearest_weekday: Vec<u16>,
}

/// Which occurrence of a weekday in its month a `#` or `L` token picks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Nth {
    Number(u8),
    Last,
}

fn days_phrase(expr: &str, cron: &Cron, months: &[u16]) -> Option<Days> {
    let p = &cron.pattern;
    let dom: Vec<u16> = p.days.values();
    let mut dow: Vec<u16> = p.days_of_week.values().iter().map(|d| d % 7).collect();
    dow.sort_unstable();
    dow.dedup();

    let (dom_extras, dow_extras) = if p.days.has_modifiers() || p.days_of_week.has_modifiers() {
        let (dom_field, dow_field) = day_fields(expr)?;
        let dom_extras = dom_modifiers(&dom_field)?;
        let dow_extras = dow_modifiers(&dow_field)?;
        let dom_found = dom_extras.last_day
            || dom_extras.last_weekday
            || !dom_extras.nearest_weekday.is_empty();
        // What we read must agree with what croner parsed, or we are not describing it.
        if dom_found != p.days.has_modifiers()
            || dow_extras.is_empty() == p.days_of_week.has_modifiers()
        {
            return None;
        }
        (dom_extras, dow_extras)
    } else {
        (DomExtras::default(), Vec::new())
    };

    let every_day = Days {
        text: None,
        months_said: false,
    };
    let dom_full = dom.len() == 31;
    let dow_full = dow.len() == 7;
    let only_dom = |months_said_ok: bool| -> Option<Days> {
        // "on January 1" reads better than "on day 1 of the month, in January".
        if months_said_ok
            && let ([day], [month]) = (dom.as_slice(), months)
            && !dom_extras.any()
        {
            return Some(Days {
                text: Some(format!("on {} {day}", month_name(*month))),
                months_said: true,
            });
        }
        Some(Days {
            text: Some(dom_text(&dom, &dom_extras)?),
            months_said: false,
        })
    };
    let only_dow = || -> Option<Days> {
        Some(Days {
            text: Some(dow_text(&dow, &dow_extras)?),
            months_said: false,
        })
    };

    match (p.is_dom_wildcard(), p.is_dow_wildcard()) {
        (true, true) => Some(every_day),
        (false, true) if dom_full => Some(every_day),
        (false, true) => only_dom(true),
        (true, false) if dow_full => Some(every_day),
        (true, false) => only_dow(),
        (false, false) if p.matches_dom_and_dow() => {
            // Croner's `+`: a day must match both fields.
            match (dom_full, dow_full) {
                (true, true) => Some(every_day),
                (true, false) => only_dow(),
                (false, true) => only_dom(false),
                (false, false) => {
                    if !dow_extras.is_empty() {
                        return None;
                    }
                    let names: Vec<String> = monday_first(&dow)
                        .iter()
                        .map(|&d| format!("a {}", weekday_name(d)))
                        .collect();
                    Some(Days {
                        text: Some(format!(
                            "{}, if that day is {}",
                            dom_text(&dom, &dom_extras)?,
                            join(&names, "or")
                        )),
                        months_said: false,
                    })
                }
            }
        }
        (false, false) => {
            // Crontab's OR: a day matching either field fires.
            if dom_full || dow_full {
                return Some(every_day);
            }
            Some(Days {
                text: Some(format!(
                    "{}, or {}",
                    dom_text(&dom, &dom_extras)?,
                    dow_text(&dow, &dow_extras)?
                )),
                months_said: false,
            })
        }
    }
}

impl DomExtras {
    fn any(&self) -> bool {
        self.last_day || self.last_weekday || !self.nearest_weekday.is_empty()
    }
}

/// "on day 1 and 15 of the month", "on the last day of the month", joined by "and".
fn dom_text(dom: &[u16], extras: &DomExtras) -> Option<String> {
    let mut parts = Vec::new();
    if !dom.is_empty() {
        parts.push(match progression(dom) {
            Some((first, step, last)) if step >= 2 && dom.len() >= 4 => format!(
                "on every {} day of the month from day {first} through {last}",
                ordinal(step)
            ),
            _ => format!(
                "on day {} of the month",
                join(&collapse(dom, |v| v.to_string()), "and")
            ),
        });
    }
    for day in &extras.nearest_weekday {
        parts.push(format!("on the weekday nearest day {day} of the month"));
    }
    if extras.last_weekday {
        parts.push("on the last weekday of the month".to_owned());
    }
    if extras.last_day {
        parts.push("on the last day of the month".to_owned());
    }
    if parts.is_empty() {
        return None;
    }
    Some(join(&parts, "and"))
}

/// "Monday to Friday", "on Monday and Friday", "on the last Friday of the month", joined by "and".
fn dow_text(dow: &[u16], extras: &[(u16, Nth)]) -> Option<String> {
    let mut parts = Vec::new();
    if !dow.is_empty() {
        let ordered = monday_first(dow);
        let names = collapse(&ordered, weekday_name);
        // A single run reads "Monday to Friday"; anything else needs "on".
        let single_run = names.len() == 1 && ordered.len() >= 3;
        let text = join(&names, "and");
        parts.push(if single_run {
            text
        } else {
            format!("on {text}")
        });
    }
    for &(day, nth) in extras {
        let which = match nth {
            Nth::Number(1) => "first",
            Nth::Number(2) => "second",
            Nth::Number(3) => "third",
            Nth::Number(4) => "fourth",
            Nth::Number(5) => "fifth",
            Nth::Number(_) => return None,
            Nth::Last => "last",
        };
        parts.push(format!("on the {which} {} of the month", weekday_name(day)));
    }
    if parts.is_empty() {
        return None;
    }
    Some(join(&parts, "and"))
}

/// The day-of-month and day-of-week fields as croner reads them: upper case, nicknames expanded,
/// names replaced by numbers, `?` as `*` and the `+` (AND) prefix dropped.
fn day_fields(expr: &str) -> Option<(String, String)> {
    let mut pattern = expr.trim().to_uppercase();
    if pattern.contains('@') {
        pattern = match pattern.as_str() {
            "@YEARLY" | "@ANNUALLY" => "0 0 1 1 *",
            "@MONTHLY" => "0 0 1 * *",
            "@WEEKLY" => "0 0 * * SUN",
            "@DAILY" => "0 0 * * *",
            "@HOURLY" => "0 * * * *",
            _ => return None,
        }
        .to_owned();
    }
    for (name, number) in [
        ("-SUN", "-7"),
        ("SUN", "0"),
        ("MON", "1"),
        ("TUE", "2"),
        ("WED", "3"),
        ("THU", "4"),
        ("FRI", "5"),
        ("SAT", "6"),
    ] {
        pattern = pattern.replace(name, number);
    }
    for (number, name) in MONTHS.iter().enumerate() {
        pattern = pattern.replace(&name[..3].to_uppercase(), &(number + 1).to_string());
    }
    let parts: Vec<&str> = pattern.split_whitespace().collect();
    let (dom, dow) = match parts.len() {
        5 => (parts[2], parts[4]),
        6 | 7 => (parts[3], parts[5]),
        _ => return None,
    };
    let dow = dow.replace('?', "*");
    let dow = dow.strip_prefix('+').map(str::to_owned).unwrap_or(dow);
    Some((dom.replace('?', "*"), dow))
}

/// Plain tokens (numbers, ranges, steps) are in croner's value sets already.
fn is_plain(token: &str) -> bool {
    token
        .chars()
        .all(|c| c.is_ascii_digit() || matches!(c, '*' | '/' | '-'))
}

fn tokens(field: &str) -> impl Iterator<Item = &str> {
    field.split(',').map(str::trim).filter(|t| !t.is_empty())
}

fn dom_modifiers(field: &str) -> Option<DomExtras> {
    let mut extras = DomExtras::default();
    for token in tokens(field).filter(|t| !is_plain(t)) {
        match token {
            "L" => extras.last_day = true,
            "LW" => extras.last_weekday = true,
            _ => {
                let day = token.strip_suffix('W')?;
                if !day.chars().all(|c| c.is_ascii_digit()) {
                    return None;
                }
                let day: u16 = day.parse().ok()?;
                if !(1..=31).contains(&day) {
                    return None;
                }
                extras.nearest_weekday.push(day);
            }
        }
    }
    // Croner reads `L` and `LW` together as `LW` alone, so a sentence naming both would be wrong.
    if extras.last_day && extras.last_weekday {
        return None;
    }
    extras.nearest_weekday.sort_unstable();
    extras.nearest_weekday.dedup();
    Some(extras)
}

fn dow_modifiers(field: &str) -> Option<Vec<(u16, Nth)>> {
    let mut extras = Vec::new();
    for token in tokens(field).filter(|t| !is_plain(t)) {
        let (day, nth) = if let Some(day) = token.strip_suffix("#L") {
            (day, Nth::Last)
        } else if let Some(day) = token.strip_suffix('L') {
            (day, Nth::Last)
        } else {
            let (day, n) = token.split_once('#')?;
            if !n.chars().all(|c| c.is_ascii_digit()) {
                return None;
            }
            let n: u8 = n.parse().ok()?;
            if !(1..=5).contains(&n) {
                return None;
            }
            (day, Nth::Number(n))
        };
        if day.is_empty() || !day.chars().all(|c| c.is_ascii_digit()) {
            return None;
        }
        let day: u16 = day.parse().ok()?;
        if day > 7 {
            return None;
        }
        extras.push((day % 7, nth));
    }
    // Monday first, as everywhere else.
    extras.sort_unstable_by_key(|&(day, nth)| ((day + 6) % 7, nth));
    extras.dedup();
    Some(extras)
}

// ---------------------------------------------------------------------------------------------
// Months and years.

fn months_phrase(months: &[u16]) -> Option<String> {
    if months.len() == 12 {
        return None;
    }
    let names = collapse(months, month_name);
    Some(if names.len() == 1 && months.len() >= 3 {
        // A single run of months: "from March to May".
        let (first, last) = (months.first()?, months.last()?);
        format!("from {} to {}", month_name(*first), month_name(*last))
    } else {
        format!("in {}", join(&names, "and"))
    })
}

fn years_phrase(years: &[u16], component: &croner::CronComponent) -> Option<String> {
    let (first, last) = (*years.first()?, *years.last()?);
    if years.len() == usize::from(component.max - component.min) + 1 {
        return None;
    }
    if years.len() >= 3 && last - first + 1 == u16::try_from(years.len()).ok()? {
        return Some(format!("from {first} to {last}"));
    }
    if let Some((first, step, last)) = progression(years)
        && step >= 2
        && years.len() >= 4
    {
        return Some(format!(
            "in every {} year from {first} through {last}",
            ordinal(step)
        ));
    }
    Some(format!(
        "in {}",
        join(&collapse(years, |v| v.to_string()), "and")
    ))
}

// ---------------------------------------------------------------------------------------------
// Small helpers.

/// "every hour", "hour 9", "every 2nd hour from 0 through 22", "hours 1 to 3 and 5".
fn field_phrase(values: &[u16], unit: &str, size: usize) -> String {
    if values.len() == size {
        return format!("every {unit}");
    }
    if let Some((first, step, last)) = progression(values)
        && step >= 2
        && values.len() >= 4
    {
        return format!("every {} {unit} from {first} through {last}", ordinal(step));
    }
    numbered(unit, values)
}

/// "minute 30", "minutes 5 and 35", "minutes 0 to 4 and 30".
fn numbered(unit: &str, values: &[u16]) -> String {
    let plural = if values.len() == 1 { "" } else { "s" };
    format!(
        "{unit}{plural} {}",
        join(&collapse(values, |v| v.to_string()), "and")
    )
}

/// The common step when `values` (ascending, at least two) are evenly spaced.
fn progression(values: &[u16]) -> Option<(u16, u16, u16)> {
    let (&first, &last) = (values.first()?, values.last()?);
    let second = *values.get(1)?;
    let step = second.checked_sub(first)?;
    if step == 0
        || values
            .windows(2)
            .any(|w| w[1].checked_sub(w[0]) != Some(step))
    {
        return None;
    }
    Some((first, step, last))
}

/// The step N when `values` are exactly `*/N` of a cycle of `size` with even gaps (N divides
/// `size`), so "every N" is true across the wrap-around too.
fn uniform_step(values: &[u16], size: u16) -> Option<u16> {
    let (first, step, last) = progression(values)?;
    (first == 0 && step >= 2 && size.is_multiple_of(step) && last + step == size).then_some(step)
}

/// Runs of consecutive values, as (first, last) pairs.
fn runs(values: &[u16]) -> Vec<(u16, u16)> {
    let mut out: Vec<(u16, u16)> = Vec::new();
    for &v in values {
        match out.last_mut() {
            Some((_, end)) if *end + 1 == v => *end = v,
            _ => out.push((v, v)),
        }
    }
    out
}

/// Values named one by one, except runs of three or more, which read "first to last".
fn collapse(values: &[u16], name: impl Fn(u16) -> String) -> Vec<String> {
    let mut out = Vec::new();
    for (first, last) in runs(values) {
        if last >= first + 2 {
            out.push(format!("{} to {}", name(first), name(last)));
        } else {
            out.extend((first..=last).map(&name));
        }
    }
    out
}

/// "a", "a and b", "a, b and c" (or "or").
fn join(items: &[String], conjunction: &str) -> String {
    match items {
        [] => String::new(),
        [only] => only.clone(),
        [init @ .., last] => format!("{} {conjunction} {last}", init.join(", ")),
    }
}

/// Weekdays in Monday-first order, Sunday as 7, so "Friday to Sunday" is one run.
fn monday_first(dow: &[u16]) -> Vec<u16> {
    let mut out: Vec<u16> = dow.iter().map(|&d| if d == 0 { 7 } else { d }).collect();
    out.sort_unstable();
    out
}

fn weekday_name(day: u16) -> String {
    WEEKDAYS
        .get(usize::from(day % 7))
        .copied()
        .unwrap_or_default()
        .to_owned()
}

fn month_name(month: u16) -> String {
    usize::from(month)
        .checked_sub(1)
        .and_then(|i| MONTHS.get(i))
        .copied()
        .unwrap_or_default()
        .to_owned()
}

fn ordinal(n: u16) -> String {
    let suffix = match (n % 10, n % 100) {
        (_, 11..=13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}

#[cfg(test)]
mod tests;
