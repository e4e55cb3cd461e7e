//! The describer's tables: every example the dashboard and the CLI rely on, the nicknames, the
//! day rules, the fallbacks, and random expressions that must never panic.

use super::*;

/// Checks every row and reports all mismatches at once.
fn check(table: &[(&str, &str)]) {
    let failures: Vec<String> = table
        .iter()
        .filter_map(|&(expr, want)| {
            let got = describe(expr);
            (got != want).then(|| format!("{expr:?}\n   want {want:?}\n    got {got:?}"))
        })
        .collect();
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[test]
fn words_examples_from_the_brief() {
    check(&[
        ("* * * * *", "every minute"),
        ("*/15 * * * *", "every 15 minutes"),
        ("0 * * * *", "every hour, on the hour"),
        ("30 * * * *", "every hour at minute 30"),
        ("0 9 * * *", "every day at 09:00"),
        ("30 2 * * 1-5", "at 02:30, Monday to Friday"),
        ("0 9,17 * * *", "every day at 09:00 and 17:00"),
        ("0 0 1 * *", "at 00:00 on day 1 of the month"),
        (
            "0 0 1,15 * 1",
            "at 00:00 on day 1 and 15 of the month, or on Monday",
        ),
        ("0 12 * 1,7 *", "every day at 12:00, in January and July"),
        (
            "*/5 9-17 * * 1-5",
            "every 5 minutes, between 09:00 and 17:59, Monday to Friday",
        ),
        ("0 */2 * * *", "every 2 hours, on the hour"),
        ("*/10 * * * * *", "every 10 seconds"),
        ("0 0 12 * * * 2027", "every day at 12:00, in 2027"),
    ]);
}

#[test]
fn words_same_sets_read_the_same() {
    check(&[
        ("0,15,30,45 * * * *", "every 15 minutes"),
        ("0-59/15 * * * *", "every 15 minutes"),
        ("0-59 0-23 1-31 1-12 0-6", "every minute"),
        ("0 0-23/2 * * *", "every 2 hours, on the hour"),
        ("0 0 * * * *", "every hour, on the hour"),
        ("0 0 9 * * *", "every day at 09:00"),
        ("0 0 9 * * * *", "every day at 09:00"),
        ("  0 9 * * *  ", "every day at 09:00"),
    ]);
}

#[test]
fn words_names_and_sunday() {
    check(&[
        ("30 2 * * MON-FRI", "at 02:30, Monday to Friday"),
        ("30 2 * * mon-fri", "at 02:30, Monday to Friday"),
        ("0 9 * * 0", "at 09:00 on Sunday"),
        ("0 9 * * 7", "at 09:00 on Sunday"),
        ("0 9 * * SUN", "at 09:00 on Sunday"),
        ("0 9 * * 6,0", "at 09:00 on Saturday and Sunday"),
        ("0 9 * * 5-7", "at 09:00, Friday to Sunday"),
        ("0 9 * * FRI-SUN", "at 09:00, Friday to Sunday"),
        ("0 9 * * 1,3,5", "at 09:00 on Monday, Wednesday and Friday"),
        (
            "0 9 * * 1,3-5",
            "at 09:00 on Monday and Wednesday to Friday",
        ),
        ("0 9 * * 0,1", "at 09:00 on Monday and Sunday"),
        ("0 9 * * 0-7", "every day at 09:00"),
        ("0 9 * * */1", "every day at 09:00"),
        (
            "0 12 * JAN,JUL *",
            "every day at 12:00, in January and July",
        ),
        ("0 12 * MAR-MAY *", "every day at 12:00, from March to May"),
        (
            "0 12 * */3 *",
            "every day at 12:00, in January, April, July and October",
        ),
        (
            "0 12 * 1-3,10 *",
            "every day at 12:00, in January to March and October",
        ),
        ("0 12 * 1-12 *", "every day at 12:00"),
    ]);
}

#[test]
fn words_nicknames() {
    check(&[
        ("@yearly", "at 00:00 on January 1"),
        ("@annually", "at 00:00 on January 1"),
        ("@monthly", "at 00:00 on day 1 of the month"),
        ("@weekly", "at 00:00 on Sunday"),
        ("@daily", "every day at 00:00"),
        ("@DAILY", "every day at 00:00"),
        ("@hourly", "every hour, on the hour"),
        ("@reboot", "cron: @reboot"),
        ("@daily 5", "cron: @daily 5"),
    ]);
}

#[test]
fn words_times_of_day() {
    check(&[
        ("30 9 * * *", "every day at 09:30"),
        ("15 30 9 * * *", "every day at 09:30:15"),
        ("0,30 9 * * *", "every day at 09:00 and 09:30"),
        ("0 9,12,17 * * *", "every day at 09:00, 12:00 and 17:00"),
        ("0 */4 * * *", "every 4 hours, on the hour"),
        ("0 0,12 * * *", "every day at 00:00 and 12:00"),
        ("30 */3 * * *", "every 3 hours at minute 30"),
        (
            "0 */5 * * *",
            "every day at 00:00, 05:00, 10:00, 15:00 and 20:00",
        ),
        ("0 9-17 * * *", "every hour from 09:00 to 17:00"),
        (
            "30 9-17 * * 1-5",
            "every hour from 09:30 to 17:30, Monday to Friday",
        ),
        ("0 1-23/2 * * *", "every 2 hours from 01:00 to 23:00"),
        (
            "0 8-11,13-17 * * *",
            "every hour from 08:00 to 11:00 and from 13:00 to 17:00",
        ),
        (
            "0 0-3,5,7-9,11,20 * * *",
            "at minute 0 past hours 0 to 3, 5, 7 to 9, 11 and 20",
        ),
        (
            "0,30 9,17 * * *",
            "every day at 09:00, 09:30, 17:00 and 17:30",
        ),
        ("0,30 0 9 * * *", "every day at 09:00:00 and 09:00:30"),
        ("30 0 9,17 * * *", "every day at 09:00:30 and 17:00:30"),
        ("30 0 * * * *", "every hour at minute 0, second 30"),
        ("0 5 */2 * * *", "every 2 hours at minute 5"),
    ]);
}

#[test]
fn words_repeats_within_the_hour() {
    check(&[
        (
            "*/7 * * * *",
            "every 7 minutes from minute 0 through 56 of every hour",
        ),
        (
            "0-29 * * * *",
            "every minute from minute 0 through 29 of every hour",
        ),
        (
            "10-50/10 * * * *",
            "every hour at minutes 10, 20, 30, 40 and 50",
        ),
        ("5-59/15 * * * *", "every hour at minutes 5, 20, 35 and 50"),
        ("5,35 * * * *", "every hour at minutes 5 and 35"),
        (
            "5,35 1-3 * * *",
            "at minutes 5 and 35, between 01:00 and 03:59",
        ),
        ("*/30 * * * *", "every 30 minutes"),
        ("*/15 9 * * *", "every day at 09:00, 09:15, 09:30 and 09:45"),
        ("*/10 9 * * *", "every 10 minutes, between 09:00 and 09:59"),
        ("* 9-17 * * *", "every minute, between 09:00 and 17:59"),
        (
            "*/15 9-11,14-17 * * *",
            "every 15 minutes, between 09:00 and 11:59 and between 14:00 and 17:59",
        ),
        (
            "*/15 */2 * * *",
            "every 15 minutes, during every 2nd hour from 0 through 22",
        ),
        (
            "*/15 1,5,9,13,20 * * *",
            "every 15 minutes, during hours 1, 5, 9, 13 and 20",
        ),
        (
            "10-50/10 9-17 * * *",
            "at minutes 10, 20, 30, 40 and 50, between 09:00 and 17:59",
        ),
        (
            "*/7 9-17 * * *",
            "every 7 minutes from minute 0 through 56, between 09:00 and 17:59",
        ),
        (
            "0-3,10,20,30,40,50 * * * *",
            "at minutes 0 to 3, 10, 20, 30, 40 and 50 of every hour",
        ),
    ]);
}

#[test]
fn words_seconds() {
    check(&[
        ("* * * * * *", "every second"),
        ("*/10 * * * * *", "every 10 seconds"),
        ("30 * * * * *", "every minute at second 30"),
        ("0,30 * * * * *", "every 30 seconds"),
        ("5,35 * * * * *", "every minute at seconds 5 and 35"),
        (
            "*/7 * * * * *",
            "every 7 seconds from second 0 through 56 of every minute",
        ),
        (
            "*/10 * 9-17 * * *",
            "every 10 seconds, between 09:00:00 and 17:59:59",
        ),
        (
            "30 * 9 * * *",
            "every minute at second 30, between 09:00:00 and 09:59:59",
        ),
        ("* 5 * * * *", "every second of minute 5 of every hour"),
        (
            "*/10 5,35 1-3 * * *",
            "every 10th second from 0 through 50 of minutes 5 and 35 past hours 1 to 3",
        ),
        (
            "30 5,35 1-3 * * *",
            "at second 30 of minutes 5 and 35 past hours 1 to 3",
        ),
        ("*/10 * * * * 1-5", "every 10 seconds, Monday to Friday"),
    ]);
}

#[test]
fn words_days_of_month_and_week() {
    check(&[
        ("0 0 1-7 * *", "at 00:00 on day 1 to 7 of the month"),
        ("0 0 1,15 * *", "at 00:00 on day 1 and 15 of the month"),
        (
            "0 0 */2 * *",
            "at 00:00 on every 2nd day of the month from day 1 through 31",
        ),
        ("0 0 1 1 *", "at 00:00 on January 1"),
        (
            "0 0 1,15 1 *",
            "at 00:00 on day 1 and 15 of the month, in January",
        ),
        ("0 0 1-31 * *", "every day at 00:00"),
        ("0 0 ? * 1", "at 00:00 on Monday"),
        ("0 0 1 * ?", "at 00:00 on day 1 of the month"),
        (
            "0 0 1 * 1-5",
            "at 00:00 on day 1 of the month, or Monday to Friday",
        ),
        (
            "0 0 1 1 1",
            "at 00:00 on day 1 of the month, or on Monday, in January",
        ),
        // OR with a field covering every day: every day.
        ("0 0 1-31 * 1", "every day at 00:00"),
        ("0 0 1 * 0-6", "every day at 00:00"),
        ("*/5 * 1 * *", "every 5 minutes, on day 1 of the month"),
        ("0 * * * 1", "every hour, on the hour, on Monday"),
    ]);
}

#[test]
fn words_and_modifier() {
    check(&[
        (
            "0 0 1-7 * +1",
            "at 00:00 on day 1 to 7 of the month, if that day is a Monday",
        ),
        (
            "0 0 1,15 * +1,5",
            "at 00:00 on day 1 and 15 of the month, if that day is a Monday or a Friday",
        ),
        ("0 0 1-31 * +1", "at 00:00 on Monday"),
        ("0 0 13 * +0-6", "at 00:00 on day 13 of the month"),
        ("0 0 * * +1", "at 00:00 on Monday"),
        ("0 0 8-14 * +5#2", "cron: 0 0 8-14 * +5#2"),
    ]);
}

#[test]
fn words_last_nearest_and_nth() {
    check(&[
        ("0 0 L * *", "at 00:00 on the last day of the month"),
        ("0 0 LW * *", "at 00:00 on the last weekday of the month"),
        (
            "0 0 15W * *",
            "at 00:00 on the weekday nearest day 15 of the month",
        ),
        (
            "0 0 1,L * *",
            "at 00:00 on day 1 of the month and on the last day of the month",
        ),
        ("0 0 L,LW * *", "cron: 0 0 L,LW * *"),
        ("0 0 * * 5L", "at 00:00 on the last Friday of the month"),
        ("0 0 * * FRIL", "at 00:00 on the last Friday of the month"),
        ("0 0 * * 5#L", "at 00:00 on the last Friday of the month"),
        ("0 0 * * 5#2", "at 00:00 on the second Friday of the month"),
        (
            "0 0 * * FRI#2",
            "at 00:00 on the second Friday of the month",
        ),
        ("0 0 * * 7#1", "at 00:00 on the first Sunday of the month"),
        (
            "0 0 * * 1,5L",
            "at 00:00 on Monday and on the last Friday of the month",
        ),
        (
            "0 0 L * 5",
            "at 00:00 on the last day of the month, or on Friday",
        ),
        // Croner accepts these but they do not mean what they seem to: no sentence.
        ("0 0 * * L", "cron: 0 0 * * L"),
        ("0 0 * * 1-5#2", "cron: 0 0 * * 1-5#2"),
    ]);
}

#[test]
fn words_years() {
    check(&[
        ("0 0 12 * * * 2027", "every day at 12:00, in 2027"),
        (
            "0 0 12 * * * 2027,2029",
            "every day at 12:00, in 2027 and 2029",
        ),
        (
            "0 0 12 * * * 2027-2030",
            "every day at 12:00, from 2027 to 2030",
        ),
        ("0 0 12 * * * *", "every day at 12:00"),
        ("0 0 0 1 1 * 2030", "at 00:00 on January 1, in 2030"),
        (
            "0 */15 * * * 1-5 2027",
            "every 15 minutes, Monday to Friday, in 2027",
        ),
    ]);
}

#[test]
fn words_invalid_expressions_echo() {
    check(&[
        ("", "cron: "),
        ("   ", "cron: "),
        ("* * * *", "cron: * * * *"),
        ("* * * * * * * *", "cron: * * * * * * * *"),
        ("60 * * * *", "cron: 60 * * * *"),
        ("* 24 * * *", "cron: * 24 * * *"),
        ("0 0 32 * *", "cron: 0 0 32 * *"),
        ("0 0 * 13 *", "cron: 0 0 * 13 *"),
        ("0 0 * * 8", "cron: 0 0 * * 8"),
        ("*/0 * * * *", "cron: */0 * * * *"),
        ("0/10 * * * *", "cron: 0/10 * * * *"),
        ("5-1 * * * *", "cron: 5-1 * * * *"),
        ("hello world how are you", "cron: hello world how are you"),
        (" not cron ", "cron: not cron"),
        // Bare commas parse but match nothing.
        (", * * * *", "cron: , * * * *"),
        ("0 0 12 * * * ,", "cron: 0 0 12 * * * ,"),
        ("0 0 , * *", "cron: 0 0 , * *"),
        ("0 0 * * ,", "cron: 0 0 * * ,"),
    ]);
}

#[test]
fn words_helpers() {
    assert_eq!(ordinal(1), "1st");
    assert_eq!(ordinal(2), "2nd");
    assert_eq!(ordinal(3), "3rd");
    assert_eq!(ordinal(4), "4th");
    assert_eq!(ordinal(11), "11th");
    assert_eq!(ordinal(12), "12th");
    assert_eq!(ordinal(13), "13th");
    assert_eq!(ordinal(21), "21st");
    assert_eq!(ordinal(22), "22nd");
    assert_eq!(ordinal(111), "111th");
    assert_eq!(uniform_step(&[0, 15, 30, 45], 60), Some(15));
    assert_eq!(uniform_step(&[0, 7, 14, 21, 28, 35, 42, 49, 56], 60), None);
    assert_eq!(uniform_step(&[5, 20, 35, 50], 60), None);
    assert_eq!(uniform_step(&[0], 60), None);
    assert_eq!(progression(&[10, 20, 30]), Some((10, 10, 30)));
    assert_eq!(progression(&[1, 2, 4]), None);
    assert_eq!(runs(&[1, 2, 3, 5, 7, 8]), vec![(1, 3), (5, 5), (7, 8)]);
    assert_eq!(
        join(&["a".to_owned(), "b".to_owned(), "c".to_owned()], "or"),
        "a, b or c"
    );
}

proptest::proptest! {
    /// Whatever the fields, describing never panics, and what croner rejects is echoed.
    #[test]
    fn words_never_panics(
        fields in proptest::collection::vec(
            proptest::sample::select(vec![
                "*", "?", "0", "1", "5", "7", "15", "23", "31", "59", "*/2", "*/7", "*/15",
                "1-5", "10-50/10", "1,15", "L", "LW", "15W", "5L", "5#2", "+1", "MON-FRI",
                "JAN", "2027", "0-6", "60", "", "a",
            ]),
            4..=8,
        )
    ) {
        let expr = fields.join(" ");
        let text = describe(&expr);
        proptest::prop_assert!(!text.is_empty());
        if parse(expr.trim()).is_none() {
            proptest::prop_assert_eq!(text, format!("cron: {}", expr.trim()));
        }
    }
}
