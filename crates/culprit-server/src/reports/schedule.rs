//! Schedules as pg_cron writes them: five cron fields (`minute hour
//! day-of-month month day-of-week`, with `*`, lists, ranges and `/` steps,
//! in UTC), or an interval of 1 to 59 seconds (`'30 seconds'`).

use chrono::{DateTime, Datelike, Duration, TimeZone, Timelike, Utc};

/// A parsed schedule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Schedule {
    /// Every so many seconds (1 to 59), aligned to the epoch.
    Seconds(u32),
    Cron(Box<CronFields>),
}

/// The allowed values of each field.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CronFields {
    minutes: [bool; 60],
    hours: [bool; 24],
    days: [bool; 32],
    months: [bool; 13],
    weekdays: [bool; 7],
    /// Both day fields restricted: either may match (cron's rule).
    days_or: bool,
}

fn field(text: &str, min: u32, max: u32, what: &str, out: &mut [bool]) -> Result<bool, String> {
    let mut restricted = true;
    for part in text.split(',') {
        let (range, step) = match part.split_once('/') {
            Some((r, s)) => (
                r,
                s.parse::<u32>()
                    .ok()
                    .filter(|s| *s > 0)
                    .ok_or_else(|| format!("bad step '{s}' in the {what} field"))?,
            ),
            None => (part, 1),
        };
        let (lo, hi) = if range == "*" {
            if step == 1 {
                restricted = false;
            }
            (min, max)
        } else if let Some((a, b)) = range.split_once('-') {
            (number(a, what)?, number(b, what)?)
        } else {
            let v = number(range, what)?;
            (v, if part.contains('/') { max } else { v })
        };
        if lo < min || hi > max || lo > hi {
            return Err(format!(
                "'{part}' is out of range in the {what} field ({min}-{max})"
            ));
        }
        let mut v = lo;
        while v <= hi {
            out[v as usize] = true;
            v += step;
        }
    }
    Ok(restricted)
}

fn number(s: &str, what: &str) -> Result<u32, String> {
    s.parse::<u32>()
        .map_err(|_| format!("'{s}' is not a number in the {what} field"))
}

impl Schedule {
    /// Reads a schedule; the error says what is wrong.
    pub fn parse(text: &str) -> Result<Schedule, String> {
        let t = text.trim();
        let lower = t.to_ascii_lowercase();
        if let Some(n) = lower
            .strip_suffix("seconds")
            .or_else(|| lower.strip_suffix("second"))
        {
            return match n.trim().parse::<u32>() {
                Ok(n) if (1..=59).contains(&n) => Ok(Schedule::Seconds(n)),
                _ => Err(format!(
                    "invalid schedule '{t}': an interval is 1 to 59 seconds ('30 seconds')"
                )),
            };
        }
        let parts: Vec<&str> = t.split_whitespace().collect();
        let [m, h, dom, mon, dow] = parts[..] else {
            return Err(format!(
                "invalid schedule '{t}': five cron fields (minute hour day month weekday) \
                 or 'N seconds'"
            ));
        };
        let bad = |e: String| format!("invalid schedule '{t}': {e}");
        let mut f = CronFields {
            minutes: [false; 60],
            hours: [false; 24],
            days: [false; 32],
            months: [false; 13],
            weekdays: [false; 7],
            days_or: false,
        };
        field(m, 0, 59, "minute", &mut f.minutes).map_err(bad)?;
        field(h, 0, 23, "hour", &mut f.hours).map_err(bad)?;
        let dom_r = field(dom, 1, 31, "day-of-month", &mut f.days).map_err(bad)?;
        field(mon, 1, 12, "month", &mut f.months).map_err(bad)?;
        let mut week = [false; 8];
        let dow_r = field(dow, 0, 7, "day-of-week", &mut week).map_err(bad)?;
        for (d, on) in week.iter().enumerate() {
            if *on {
                f.weekdays[d % 7] = true;
            }
        }
        f.days_or = dom_r && dow_r;
        if !dom_r && dow_r {
            f.days = [true; 32];
        }
        if dom_r && !dow_r {
            f.weekdays = [true; 7];
        }
        Ok(Schedule::Cron(Box::new(f)))
    }

    /// The first time strictly after `after` that the schedule names.
    pub fn next_after(&self, after: DateTime<Utc>) -> Option<DateTime<Utc>> {
        match self {
            Schedule::Seconds(n) => {
                let n = *n as i64;
                let t = after.timestamp();
                Utc.timestamp_opt((t.div_euclid(n) + 1) * n, 0).single()
            }
            Schedule::Cron(f) => {
                // Minute by minute, skipping whole hours and days that
                // cannot match; a year of minutes bounds the search.
                let mut t = after.with_second(0)?.with_nanosecond(0)? + Duration::minutes(1);
                let end = t + Duration::days(366 * 5);
                while t < end {
                    let day_ok = {
                        let dom = f.days[t.day() as usize];
                        let dow = f.weekdays[t.weekday().num_days_from_sunday() as usize];
                        if f.days_or {
                            dom || dow
                        } else {
                            dom && dow
                        }
                    };
                    if !f.months[t.month() as usize] || !day_ok {
                        t = (t + Duration::days(1)).with_hour(0)?.with_minute(0)?;
                        continue;
                    }
                    if !f.hours[t.hour() as usize] {
                        t = (t + Duration::hours(1)).with_minute(0)?;
                        continue;
                    }
                    if f.minutes[t.minute() as usize] {
                        return Some(t);
                    }
                    t += Duration::minutes(1);
                }
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> DateTime<Utc> {
        DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
    }

    #[test]
    fn cron_fields_as_pg_cron_reads_them() {
        let daily = Schedule::parse("0 7 * * *").unwrap();
        assert_eq!(
            daily.next_after(at("2026-11-24T06:59:59Z")),
            Some(at("2026-11-24T07:00:00Z"))
        );
        assert_eq!(
            daily.next_after(at("2026-11-24T07:00:00Z")),
            Some(at("2026-11-25T07:00:00Z"))
        );
        let every5 = Schedule::parse("*/5 * * * *").unwrap();
        assert_eq!(
            every5.next_after(at("2026-11-24T10:03:10Z")),
            Some(at("2026-11-24T10:05:00Z"))
        );
        // Monday to Friday at 09:30 (2026-11-28 is a Saturday).
        let weekdays = Schedule::parse("30 9 * * 1-5").unwrap();
        assert_eq!(
            weekdays.next_after(at("2026-11-27T10:00:00Z")),
            Some(at("2026-11-30T09:30:00Z"))
        );
        // Sunday as 0 or 7.
        assert_eq!(
            Schedule::parse("0 0 * * 7").unwrap(),
            Schedule::parse("0 0 * * 0").unwrap()
        );
        let first = Schedule::parse("0 0 1 1,7 *").unwrap();
        assert_eq!(
            first.next_after(at("2026-02-01T00:00:00Z")),
            Some(at("2026-07-01T00:00:00Z"))
        );
        // Never: the 30th of February.
        assert_eq!(
            Schedule::parse("0 0 30 2 *")
                .unwrap()
                .next_after(at("2026-01-01T00:00:00Z")),
            None
        );
    }

    #[test]
    fn intervals_and_errors() {
        let s = Schedule::parse("5 seconds").unwrap();
        assert_eq!(
            s.next_after(at("2026-11-24T10:00:03Z")),
            Some(at("2026-11-24T10:00:05Z"))
        );
        assert_eq!(
            s.next_after(at("2026-11-24T10:00:05Z")),
            Some(at("2026-11-24T10:00:10Z"))
        );
        for bad in [
            "",
            "60 seconds",
            "0 seconds",
            "* * * *",
            "61 * * * *",
            "x * * * *",
            "*/0 * * * *",
            "5-1 * * * *",
        ] {
            assert!(Schedule::parse(bad).is_err(), "{bad}");
        }
    }
}
