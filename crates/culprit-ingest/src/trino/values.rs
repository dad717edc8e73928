//! The value formats of Trino's and Presto's JSON: airlift `Duration`
//! (`"12.90s"`, `"234.99us"`, `"47.57m"`) and `DataSize` (`"25754984835B"`,
//! `"40.50kB"`), `java.time.Duration` as Jackson writes it (decimal seconds,
//! or ISO-8601 `PT1M2.5S`), and times as ISO-8601 text or epoch numbers.

use serde_json::Value;

/// Seconds of a duration value. Text is airlift's `Duration` (a number and
/// a unit: `ns`, `us`, `ms`, `s`, `m`, `h`, `d`) or ISO-8601 (`PT2M3.5S`);
/// a number is seconds (`java.time.Duration` as Jackson writes it).
pub fn seconds(v: &Value) -> Option<f64> {
    let s = match v {
        Value::Number(n) => return n.as_f64().filter(|x| x.is_finite() && *x >= 0.0),
        Value::String(s) => s.trim(),
        _ => return None,
    };
    if let Some(iso) = s.strip_prefix("PT").or_else(|| s.strip_prefix("pt")) {
        return iso_seconds(iso);
    }
    let split = s
        .find(|c: char| c.is_ascii_alphabetic())
        .filter(|i| *i > 0)?;
    let (number, unit) = s.split_at(split);
    let x: f64 = number.trim().parse().ok()?;
    let scale = match unit.trim() {
        "ns" => 1e-9,
        "us" => 1e-6,
        "ms" => 1e-3,
        "s" => 1.0,
        "m" => 60.0,
        "h" => 3600.0,
        "d" => 86400.0,
        _ => return None,
    };
    Some(x * scale).filter(|x| x.is_finite() && *x >= 0.0)
}

/// `1H2M3.5S` (after `PT`).
fn iso_seconds(s: &str) -> Option<f64> {
    let mut total = 0.0;
    let mut number = String::new();
    for c in s.chars() {
        match c {
            '0'..='9' | '.' | '-' => number.push(c),
            'H' | 'h' | 'M' | 'm' | 'S' | 's' => {
                let x: f64 = number.parse().ok()?;
                number.clear();
                total += x * match c.to_ascii_uppercase() {
                    'H' => 3600.0,
                    'M' => 60.0,
                    _ => 1.0,
                };
            }
            _ => return None,
        }
    }
    (number.is_empty() && total.is_finite() && total >= 0.0).then_some(total)
}

/// Bytes of a data-size value: airlift's `DataSize` text (`B`, `kB`, `MB`,
/// `GB`, `TB`, `PB`, powers of 1024) or a number of bytes.
pub fn bytes(v: &Value) -> Option<f64> {
    let s = match v {
        Value::Number(n) => return n.as_f64().filter(|x| x.is_finite() && *x >= 0.0),
        Value::String(s) => s.trim(),
        _ => return None,
    };
    let split = s
        .find(|c: char| c.is_ascii_alphabetic())
        .filter(|i| *i > 0)?;
    let (number, unit) = s.split_at(split);
    let x: f64 = number.trim().parse().ok()?;
    let scale = match unit.trim() {
        "B" => 1.0,
        "kB" | "KB" => 1024.0,
        "MB" => 1024.0 * 1024.0,
        "GB" => 1024.0 * 1024.0 * 1024.0,
        "TB" => 1024f64.powi(4),
        "PB" => 1024f64.powi(5),
        _ => return None,
    };
    Some(x * scale).filter(|x| x.is_finite() && *x >= 0.0)
}

/// Microseconds since the epoch of a time value: ISO-8601 text
/// (`2024-07-04T15:31:37.047Z`), or a number of epoch seconds (Jackson's
/// `Instant`, `1750063688.759`) or, when it is too large to be seconds,
/// epoch milliseconds.
pub fn micros(v: &Value) -> Option<i64> {
    match v {
        Value::String(s) => chrono::DateTime::parse_from_rfc3339(s.trim())
            .ok()
            .map(|t| t.timestamp_micros()),
        Value::Number(n) => {
            let x = n.as_f64().filter(|x| x.is_finite() && *x > 0.0)?;
            let us = if x < 1e11 { x * 1e6 } else { x * 1e3 };
            Some(us.round() as i64)
        }
        _ => None,
    }
}

/// The nanoseconds total of a distribution snapshot (`{"total": ns, ...}`,
/// as Trino writes a pipeline's driver `queuedTime`), in seconds; a plain
/// duration value is read as one.
pub fn distribution_total_seconds(v: &Value) -> Option<f64> {
    match v {
        Value::Object(o) => o
            .get("total")
            .and_then(Value::as_f64)
            .filter(|x| x.is_finite() && *x >= 0.0)
            .map(|ns| ns / 1e9),
        other => seconds(other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn durations() {
        assert_eq!(seconds(&json!("12.90s")), Some(12.9));
        assert!((seconds(&json!("234.99us")).unwrap() - 234.99e-6).abs() < 1e-15);
        assert!((seconds(&json!("47.57m")).unwrap() - 2854.2).abs() < 1e-9);
        assert_eq!(seconds(&json!("0.00ns")), Some(0.0));
        assert_eq!(seconds(&json!("1.50h")), Some(5400.0));
        assert_eq!(seconds(&json!(371.792)), Some(371.792));
        assert_eq!(seconds(&json!("PT6M11.792S")), Some(371.792));
        assert_eq!(seconds(&json!("PT0S")), Some(0.0));
        assert_eq!(seconds(&json!("12.9 parsecs")), None);
        assert_eq!(seconds(&json!("s")), None);
        assert_eq!(seconds(&json!(-1)), None);
        assert_eq!(seconds(&json!(null)), None);
    }

    #[test]
    fn data_sizes() {
        assert_eq!(bytes(&json!("25754984835B")), Some(25754984835.0));
        assert_eq!(bytes(&json!("40.50kB")), Some(40.5 * 1024.0));
        assert_eq!(bytes(&json!("2MB")), Some(2.0 * 1024.0 * 1024.0));
        assert_eq!(bytes(&json!(98161684)), Some(98161684.0));
        assert_eq!(bytes(&json!("12 bananas")), None);
    }

    #[test]
    fn times() {
        assert_eq!(
            micros(&json!("2024-07-04T15:31:37.047Z")),
            Some(1_720_107_097_047_000)
        );
        assert_eq!(
            micros(&json!("2024-07-04T15:31:37.045986633Z")),
            Some(1_720_107_097_045_986)
        );
        assert_eq!(micros(&json!(1750063688.759)), Some(1_750_063_688_759_000));
        assert_eq!(
            micros(&json!(1750063688759i64)),
            Some(1_750_063_688_759_000)
        );
        assert_eq!(micros(&json!("yesterday")), None);
    }

    #[test]
    fn distributions() {
        assert_eq!(
            distribution_total_seconds(&json!({"count": 8.0, "total": 3596999.0})),
            Some(0.003596999)
        );
        assert_eq!(distribution_total_seconds(&json!("2.00ms")), Some(0.002));
    }
}
