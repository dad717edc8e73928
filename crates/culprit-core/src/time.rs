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
