//! RFC 3339 timestamps without a clock: formatting seconds since the epoch as the ledger and
//! receipts record them (UTC, `Z`), and reading any RFC 3339 instant back (offsets, fractional
//! seconds) so that times written elsewhere (a trusted keys file) compare as instants, not text.

/// An instant: whole seconds since 1970-01-01T00:00:00Z and the nanoseconds past them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Instant {
    pub secs: i64,
    pub nanos: u32,
}

/// `YYYY-MM-DDTHH:MM:SSZ` of `unix_secs`.
pub fn format_rfc3339(unix_secs: u64) -> String {
    let days = (unix_secs / 86_400) as i64;
    let rem = unix_secs % 86_400;
    let (y, m, d) = civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", rem / 3600, (rem % 3600) / 60, rem % 60)
}

/// `YYYY-MM` of an RFC 3339 timestamp, if it has one.
pub fn month_of(timestamp: &str) -> Option<&str> {
    let month = timestamp.get(..7)?;
    let b = month.as_bytes();
    let digits = |r: std::ops::Range<usize>| b[r].iter().all(u8::is_ascii_digit);
    (digits(0..4) && b[4] == b'-' && digits(5..7)).then_some(month)
}

/// The instant an RFC 3339 date-time names (`2026-05-22T09:01:01Z`, `...T14:01:01.5+05:00`; `t`
/// or a space for `T`, `z` for `Z`). `Err` says why the text is not one.
pub fn parse_rfc3339(text: &str) -> Result<Instant, String> {
    let bad = |why: &str| format!("`{text}` is not an RFC 3339 time ({why}; e.g. 2026-01-31T12:00:00Z)");
    let b = text.as_bytes();
    if b.len() < 20 || !text.is_ascii() {
        return Err(bad("too short"));
    }
    let number = |r: std::ops::Range<usize>| -> Result<i64, String> {
        let part = &text[r];
        match part.bytes().all(|c| c.is_ascii_digit()) {
            true => part.parse::<i64>().map_err(|_| bad("not a number")),
            false => Err(bad("a date or time part is not digits")),
        }
    };
    let separators = [(4, b'-'), (7, b'-'), (13, b':'), (16, b':')];
    if separators.iter().any(|(at, c)| b[*at] != *c) || !matches!(b[10], b'T' | b't' | b' ') {
        return Err(bad("not laid out as YYYY-MM-DDTHH:MM:SS"));
    }
    let (year, month, day) = (number(0..4)?, number(5..7)?, number(8..10)?);
    let (hour, minute, second) = (number(11..13)?, number(14..16)?, number(17..19)?);
    if !(1..=12).contains(&month) || day < 1 || day > days_in_month(year, month) {
        return Err(bad("no such date"));
    }
    // 60: a leap second.
    if hour > 23 || minute > 59 || second > 60 {
        return Err(bad("no such time of day"));
    }
    let mut at = 19;
    let mut nanos: u32 = 0;
    if b[at] == b'.' {
        let digits = b[at + 1..].iter().take_while(|c| c.is_ascii_digit()).count();
        if digits == 0 {
            return Err(bad("a `.` without fractional digits"));
        }
        let kept = &text[at + 1..at + 1 + digits.min(9)];
        nanos = format!("{kept:0<9}").parse().map_err(|_| bad("fractional seconds"))?;
        at += 1 + digits;
    }
    let offset = match &b[at..] {
        [b'Z' | b'z'] => 0,
        [sign @ (b'+' | b'-'), _, _, b':', _, _] => {
            let (h, m) = (number(at + 1..at + 3)?, number(at + 4..at + 6)?);
            if h > 23 || m > 59 {
                return Err(bad("no such offset"));
            }
            let minutes = h * 60 + m;
            if *sign == b'-' { -minutes } else { minutes }
        }
        _ => return Err(bad("no `Z` or `+HH:MM` offset")),
    };
    let days = days_from_civil(year, month as u32, day as u32);
    let secs = days * 86_400 + hour * 3600 + minute * 60 + second - offset * 60;
    Ok(Instant { secs, nanos })
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (Howard Hinnant's method).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
}

/// (year, month, day) to days since 1970-01-01: the inverse of [`civil_from_days`].
fn days_from_civil(y: i64, m: u32, d: u32) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = i64::from(if m > 2 { m - 3 } else { m + 9 });
    let doy = (153 * mp + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_known_instants() {
        assert_eq!(format_rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(format_rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(format_rfc3339(1_779_440_461), "2026-05-22T09:01:01Z");
        assert_eq!(month_of("2026-05-15T09:00:00Z"), Some("2026-05"));
        assert_eq!(month_of("soon"), None);
    }

    #[test]
    fn reads_instants_with_offsets_and_fractions() {
        let at = |text: &str| parse_rfc3339(text).unwrap();
        for secs in [0, 951_782_400, 1_779_440_461, 4_102_444_800] {
            assert_eq!(at(&format_rfc3339(secs)), Instant { secs: secs as i64, nanos: 0 });
        }
        assert_eq!(at("2026-05-22T14:01:01+05:00"), at("2026-05-22T09:01:01Z"));
        assert_eq!(at("2026-05-22t04:31:01-04:30"), at("2026-05-22T09:01:01z"));
        assert_eq!(at("2026-05-22 09:01:01Z"), at("2026-05-22T09:01:01Z"));
        assert_eq!(at("2026-05-22T09:01:01.5Z"), Instant { nanos: 500_000_000, ..at("2026-05-22T09:01:01Z") });
        assert_eq!(at("2026-05-22T09:01:01.1234567891Z").nanos, 123_456_789);
        assert!(at("2026-05-22T09:01:01.5Z") > at("2026-05-22T09:01:01Z"));
        assert!(at("2026-05-22T13:01:01+05:00") < at("2026-05-22T09:01:01Z"));
        for garbage in [
            "garbage",
            "",
            "2026-05-22",
            "2026-05-22T09:01:01",
            "2026-13-01T00:00:00Z",
            "2026-02-29T00:00:00Z",
            "2026-05-22T24:00:00Z",
            "2026-05-22T09:01:01.Z",
            "2026-05-22T09:01:01+5:00",
            "2026-05-22T09:01:01Z ",
            "+026-05-22T09:01:01Z",
            "2026-05-22T09:01:01+24:00",
        ] {
            let err = parse_rfc3339(garbage).unwrap_err();
            assert!(err.contains("is not an RFC 3339 time"), "{garbage}: {err}");
        }
    }
}
