//! Time values as the interchange format and the SQL functions accept them.

use chrono::{DateTime, NaiveDateTime};

/// Parses RFC 3339 text (also with a space for `T`, or without a zone, read
/// as UTC) or integer epoch milliseconds, into epoch microseconds.
pub fn parse_time(v: &str) -> Option<i64> {
    let v = v.trim();
    if let Ok(ms) = v.parse::<i64>() {
        return ms.checked_mul(1000);
    }
    if let Ok(t) = DateTime::parse_from_rfc3339(v) {
        return Some(t.timestamp_micros());
    }
    let with_t = v.replacen(' ', "T", 1);
    if let Ok(t) = DateTime::parse_from_rfc3339(&with_t) {
        return Some(t.timestamp_micros());
    }
    for fmt in ["%Y-%m-%dT%H:%M:%S%.f", "%Y-%m-%dT%H:%M:%S"] {
        if let Ok(t) = NaiveDateTime::parse_from_str(&with_t, fmt) {
            return Some(t.and_utc().timestamp_micros());
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms() {
        assert_eq!(parse_time("1970-01-01T00:00:01Z"), Some(1_000_000));
        assert_eq!(parse_time("1970-01-01 00:00:01.5+00:00"), Some(1_500_000));
        assert_eq!(parse_time("1970-01-01T00:00:02"), Some(2_000_000));
        assert_eq!(parse_time("1970-01-01 00:00:02"), Some(2_000_000));
        assert_eq!(parse_time("2500"), Some(2_500_000));
        assert_eq!(parse_time("yesterday"), None);
    }
}

/// A duration in microseconds from PostgreSQL-style text: a number and a
/// unit (`30 seconds`, `5 min`, `1 hour`, `2 days`, `500ms`, `90s`), or
/// `HH:MM:SS`. `None` when it is not one or not positive.
pub fn parse_duration(text: &str) -> Option<i64> {
    let t = text.trim().to_ascii_lowercase();
    if let [h, m, s] = t.split(':').collect::<Vec<_>>()[..] {
        let (h, m, s): (f64, f64, f64) = (h.parse().ok()?, m.parse().ok()?, s.parse().ok()?);
        return positive_micros((h * 3600.0 + m * 60.0 + s) * 1e6);
    }
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (number, unit) = t.split_at(split);
    let number: f64 = number.trim().parse().ok()?;
    let seconds_per = match unit.trim() {
        "" | "s" | "sec" | "secs" | "second" | "seconds" => 1.0,
        "us" | "microsecond" | "microseconds" => 1e-6,
        "ms" | "msec" | "millisecond" | "milliseconds" => 1e-3,
        "m" | "min" | "mins" | "minute" | "minutes" => 60.0,
        "h" | "hr" | "hour" | "hours" => 3600.0,
        "d" | "day" | "days" => 86400.0,
        _ => return None,
    };
    positive_micros(number * seconds_per * 1e6)
}

fn positive_micros(us: f64) -> Option<i64> {
    (us.is_finite() && us >= 1.0 && us < i64::MAX as f64).then(|| us.round() as i64)
}

#[cfg(test)]
mod duration_tests {
    use super::parse_duration;

    #[test]
    fn durations_as_people_write_them() {
        assert_eq!(parse_duration("30 seconds"), Some(30_000_000));
        assert_eq!(parse_duration("5 min"), Some(300_000_000));
        assert_eq!(parse_duration("1 hour"), Some(3_600_000_000));
        assert_eq!(parse_duration("500ms"), Some(500_000));
        assert_eq!(parse_duration("90"), Some(90_000_000));
        assert_eq!(parse_duration("00:01:30"), Some(90_000_000));
        for bad in ["", "0 s", "-1 s", "1 fortnight", "x", "1e400 s"] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
    }
}
