//! Literal arguments of the table functions: positional values, then
//! options written as `'key=value'` text (DataFusion 55 does not plan named
//! arguments of table functions).

use std::sync::Arc;

use culprit_core::method::{Attribution, BlameOptions, Micros, SlotBlame, TaskBlame, VictimStages};
use datafusion::arrow::array::RecordBatch;
use datafusion::arrow::datatypes::{DataType, Schema};
use datafusion::catalog::TableFunctionArgs;
use datafusion::common::{DFSchema, Result, ScalarValue};
use datafusion::logical_expr::ColumnarValue;

/// A bad argument of `$function`: typed, so it reaches a client as 22023
/// whatever the words.
macro_rules! bad_arg {
    ($function:expr, $($fmt:tt)*) => {
        Err(crate::error::to_datafusion(culprit_engine::Error::argument(
            $function,
            format!($($fmt)*),
        )))
    };
}
pub(crate) use bad_arg;

/// The evaluated arguments of a call.
pub struct Args {
    pub function: &'static str,
    pub positional: Vec<ScalarValue>,
    pub options: Vec<(String, String)>,
}

impl Args {
    /// Evaluates every argument to a constant (a literal, a cast, `now()`,
    /// ...); a column reference or a non-constant is an error.
    pub fn parse(function: &'static str, args: &TableFunctionArgs) -> Result<Args> {
        let empty = DFSchema::empty();
        let batch = RecordBatch::new_empty(Arc::new(Schema::empty()));
        let mut positional = Vec::new();
        let mut options = Vec::new();
        for (i, e) in args.exprs().iter().enumerate() {
            let value = match args
                .session()
                .create_physical_expr(e.clone(), &empty)
                .and_then(|p| p.evaluate(&batch))
            {
                Ok(ColumnarValue::Scalar(v)) => v,
                _ => return bad_arg!(function, "argument {} ({e}) must be a constant", i + 1),
            };
            if let ScalarValue::Utf8(Some(s))
            | ScalarValue::LargeUtf8(Some(s))
            | ScalarValue::Utf8View(Some(s)) = &value
            {
                if let Some((k, v)) = option(s) {
                    options.push((k, v));
                    continue;
                }
            }
            if !options.is_empty() {
                return bad_arg!(function, "positional argument {} after an option", i + 1);
            }
            positional.push(value);
        }
        Ok(Args {
            function,
            positional,
            options,
        })
    }

    pub fn max_positional(&self, n: usize, usage: &str) -> Result<()> {
        if self.positional.len() > n {
            return bad_arg!(self.function, "too many arguments; usage: {usage}",);
        }
        Ok(())
    }

    /// Positional text (`NULL` or absent: `None`).
    pub fn text(&self, i: usize) -> Result<Option<String>> {
        match self.positional.get(i) {
            None => Ok(None),
            Some(v) if v.is_null() => Ok(None),
            Some(ScalarValue::Utf8(Some(s)))
            | Some(ScalarValue::LargeUtf8(Some(s)))
            | Some(ScalarValue::Utf8View(Some(s))) => Ok(Some(s.clone())),
            Some(v) => bad_arg!(self.function, "argument {} must be text, got {v}", i + 1),
        }
    }

    /// Positional time: a timestamp, RFC 3339 text or epoch milliseconds.
    pub fn time(&self, i: usize) -> Result<Option<Micros>> {
        let v = match self.positional.get(i) {
            None => return Ok(None),
            Some(v) if v.is_null() => return Ok(None),
            Some(v) => v,
        };
        let us = match v {
            ScalarValue::TimestampSecond(Some(x), _) => Some(x.saturating_mul(1_000_000)),
            ScalarValue::TimestampMillisecond(Some(x), _) => Some(x.saturating_mul(1000)),
            ScalarValue::TimestampMicrosecond(Some(x), _) => Some(*x),
            ScalarValue::TimestampNanosecond(Some(x), _) => Some(x / 1000),
            ScalarValue::Int64(Some(x)) => Some(x.saturating_mul(1000)),
            ScalarValue::Int32(Some(x)) => Some(*x as i64 * 1000),
            ScalarValue::Utf8(Some(s))
            | ScalarValue::LargeUtf8(Some(s))
            | ScalarValue::Utf8View(Some(s)) => culprit_core::time::parse_time(s),
            _ => None,
        };
        match us {
            Some(us) => Ok(Some(us)),
            None => bad_arg!(
                self.function,
                "argument {} is not a time (a timestamp, RFC 3339 text or epoch milliseconds): {v}",
                i + 1
            ),
        }
    }

    /// Positional number (an integer, a decimal or a float; `NULL` or
    /// absent: `None`).
    pub fn number(&self, i: usize) -> Result<Option<f64>> {
        match self.positional.get(i) {
            None => Ok(None),
            Some(v) if v.is_null() => Ok(None),
            Some(v) if v.data_type().is_numeric() => match v.cast_to(&DataType::Float64) {
                Ok(ScalarValue::Float64(Some(x))) => Ok(Some(x)),
                _ => bad_arg!(self.function, "argument {} is not a number: {v}", i + 1),
            },
            Some(v) => bad_arg!(
                self.function,
                "argument {} must be a number, got {v}",
                i + 1
            ),
        }
    }

    /// An option's value as a finite non-negative number.
    pub fn option_number(&self, key: &str, value: &str) -> Result<f64> {
        match value.trim().parse::<f64>() {
            Ok(x) if x.is_finite() && x >= 0.0 => Ok(x),
            _ => bad_arg!(
                self.function,
                "option {key} must be a finite non-negative number, got '{value}'"
            ),
        }
    }

    /// `x` as a count: a whole number from 1 to 2^32 - 1; `what` names it
    /// in the error.
    pub fn count(&self, what: &str, x: f64) -> Result<usize> {
        if x >= 1.0 && x.fract() == 0.0 && x <= u32::MAX as f64 {
            Ok(x as usize)
        } else {
            bad_arg!(
                self.function,
                "{what} must be a positive whole number, got {x}"
            )
        }
    }

    /// Blame options from the `from`/`to` positions and the option strings.
    pub fn blame_options(
        &self,
        victims: Option<Vec<String>>,
        from: usize,
        to: usize,
    ) -> Result<BlameOptions> {
        let mut o = BlameOptions {
            victims,
            from: self.time(from)?,
            to: self.time(to)?,
            ..Default::default()
        };
        if let (Some(a), Some(b)) = (o.from, o.to) {
            if a >= b {
                return bad_arg!(self.function, "'from' must be before 'to'",);
            }
        }
        for (k, v) in &self.options {
            match k.as_str() {
                "victim_stages" | "stages" => {
                    o.stages = match v.as_str() {
                        "critical_path" => VictimStages::CriticalPath,
                        "all" => VictimStages::All,
                        s => VictimStages::Stage(s.to_string()),
                    }
                }
                "attribution" => {
                    o.attribution = match v.as_str() {
                        "window" => Attribution::Window,
                        "paper" => Attribution::Paper,
                        _ => {
                            return bad_arg!(
                                self.function,
                                "attribution must be 'window' or 'paper', got '{v}'",
                            )
                        }
                    }
                }
                "slots" => {
                    o.slots = match v.as_str() {
                        "direct" => SlotBlame::Direct,
                        "transitive" => SlotBlame::Transitive,
                        _ => {
                            return bad_arg!(
                                self.function,
                                "slots must be 'direct' or 'transitive', got '{v}'",
                            )
                        }
                    }
                }
                "victim_tasks" | "tasks" => {
                    o.tasks = match v.as_str() {
                        "all" => TaskBlame::All,
                        "last" => TaskBlame::Last,
                        _ => {
                            return bad_arg!(
                                self.function,
                                "victim_tasks must be 'all' or 'last', got '{v}'",
                            )
                        }
                    }
                }
                _ => return bad_arg!(self.function, "unknown option '{k}'",),
            }
        }
        Ok(o)
    }

    /// The victim-centric call `(victim [, from [, to]] [, options])`.
    pub fn victim_call(&self, signature: &str) -> Result<BlameOptions> {
        self.max_positional(3, signature)?;
        let victims = self.text(0)?.map(|v| vec![v]);
        self.blame_options(victims, 1, 2)
    }

    /// The call over all victims of a window `([from [, to]] [, options])`.
    pub fn window_call(&self, signature: &str) -> Result<BlameOptions> {
        self.max_positional(2, signature)?;
        self.blame_options(None, 0, 1)
    }

    /// The step of a series at position `i`: seconds as a number, a
    /// duration as text (`'1 minute'`, `'30 seconds'`) or an interval. A
    /// series needs its `from` and `to` (in `opts`).
    pub fn series_step(&self, i: usize, opts: &BlameOptions, signature: &str) -> Result<Micros> {
        if opts.from.is_none() || opts.to.is_none() {
            return bad_arg!(
                self.function,
                "a series needs 'from' and 'to'; usage: {signature}"
            );
        }
        let us = match self.positional.get(i) {
            None => return bad_arg!(self.function, "the step is required; usage: {signature}"),
            Some(v) if v.is_null() => {
                return bad_arg!(self.function, "the step is required; usage: {signature}")
            }
            Some(ScalarValue::IntervalMonthDayNano(Some(v))) if v.months == 0 => {
                Some(v.days as i64 * 86_400_000_000 + v.nanoseconds / 1000)
            }
            Some(ScalarValue::IntervalDayTime(Some(v))) => {
                Some(v.days as i64 * 86_400_000_000 + v.milliseconds as i64 * 1000)
            }
            Some(ScalarValue::Utf8(Some(s)))
            | Some(ScalarValue::LargeUtf8(Some(s)))
            | Some(ScalarValue::Utf8View(Some(s))) => culprit_core::time::parse_duration(s),
            Some(v) if v.data_type().is_numeric() => match v.cast_to(&DataType::Float64) {
                Ok(ScalarValue::Float64(Some(x))) if x.is_finite() && x > 0.0 && x < 1e12 => {
                    Some((x * 1e6).round() as i64)
                }
                _ => None,
            },
            Some(_) => None,
        };
        match us {
            Some(us) if us > 0 => Ok(us),
            _ => bad_arg!(
                self.function,
                "the step (argument {}) must be a positive duration: seconds, text such as \
                 '1 minute', or an interval",
                i + 1
            ),
        }
    }

    /// The call on one query `(query)`: its id.
    pub fn query_call(&self, signature: &str) -> Result<String> {
        self.no_options()?;
        self.max_positional(1, signature)?;
        self.required_query(signature)
    }

    /// The query id of the first position, which may not be NULL.
    pub fn required_query(&self, signature: &str) -> Result<String> {
        match self.text(0)? {
            Some(q) => Ok(q),
            None => bad_arg!(
                self.function,
                "the query id is required; usage: {signature}"
            ),
        }
    }

    pub fn no_options(&self) -> Result<()> {
        if let Some((k, _)) = self.options.first() {
            return bad_arg!(self.function, "takes no option '{k}'",);
        }
        Ok(())
    }
}

/// The option names; any other text is a positional value (a query id may
/// hold a `=`). The blame functions take the first six, `estimate()` the
/// rest.
const OPTIONS: [&str; 15] = [
    "victim_stages",
    "stages",
    "attribution",
    "slots",
    "victim_tasks",
    "tasks",
    "theta_disk_read",
    "theta_disk_write",
    "theta_network",
    "theta_cpu",
    "n_cores",
    "slots_per_host",
    "hosts",
    "t_load",
    "skew",
];

/// `key=value` or `key => value`, for a known key.
fn option(s: &str) -> Option<(String, String)> {
    let (k, v) = s.split_once("=>").or_else(|| s.split_once('='))?;
    let k = k.trim().to_ascii_lowercase();
    if !OPTIONS.contains(&k.as_str()) {
        return None;
    }
    Some((k, v.trim().trim_matches('\'').to_string()))
}

#[cfg(test)]
mod tests {
    #[test]
    fn options() {
        assert_eq!(
            super::option("victim_stages => all"),
            Some(("victim_stages".into(), "all".into()))
        );
        assert_eq!(
            super::option("slots=transitive"),
            Some(("slots".into(), "transitive".into()))
        );
        assert_eq!(
            super::option("victim_tasks=last"),
            Some(("victim_tasks".into(), "last".into()))
        );
        assert_eq!(super::option("2026-01-01T00:00:00Z"), None);
        assert_eq!(super::option("app/q=1"), None);
    }
}

/// A proptest-driven fuzz test of the argument parser: arbitrary text and
/// mutations of valid option strings and times never panic, and every
/// error carries a message. Cases: `CULPRIT_FUZZ_CASES` (default 2,000,000,
/// about 20 s in release mode).
#[cfg(test)]
mod fuzz {
    use super::*;
    use proptest::prelude::*;

    const VALID: [&str; 14] = [
        "victim_stages=all",
        "victim_stages => critical_path",
        "stages='stage-1'",
        "attribution=window",
        "attribution => paper",
        "slots=direct",
        "slots => transitive",
        "victim_tasks=last",
        "tasks => all",
        "2026-01-01T00:00:00Z",
        "2026-01-01 00:00:00.5+02:00",
        "2026-01-01T00:00:00",
        "1767225600000",
        "app-1/q-7",
    ];

    fn cases() -> u32 {
        std::env::var("CULPRIT_FUZZ_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(2_000_000)
    }

    /// A valid string with a few bytes replaced, inserted or removed.
    fn mutated() -> impl Strategy<Value = String> {
        (
            prop::sample::select(&VALID[..]),
            prop::collection::vec((any::<u16>(), 0u8..3, any::<char>()), 0..4),
        )
            .prop_map(|(s, edits)| {
                let mut c: Vec<char> = s.chars().collect();
                for (at, op, ch) in edits {
                    let i = at as usize % (c.len() + 1);
                    match op {
                        0 if i < c.len() => c[i] = ch,
                        1 => c.insert(i, ch),
                        _ if i < c.len() => {
                            c.remove(i);
                        }
                        _ => c.push(ch),
                    }
                }
                c.into_iter().collect()
            })
    }

    fn text() -> impl Strategy<Value = String> {
        prop_oneof![any::<String>(), mutated(), "[=> '0-9a-z_:.+TZ-]{0,40}"]
    }

    fn scalar() -> impl Strategy<Value = ScalarValue> {
        prop_oneof![
            text().prop_map(|s| ScalarValue::Utf8(Some(s))),
            text().prop_map(|s| ScalarValue::Utf8View(Some(s))),
            any::<i64>().prop_map(|x| ScalarValue::Int64(Some(x))),
            any::<i32>().prop_map(|x| ScalarValue::Int32(Some(x))),
            any::<i64>().prop_map(|x| ScalarValue::TimestampSecond(Some(x), None)),
            any::<i64>().prop_map(|x| ScalarValue::TimestampMillisecond(Some(x), None)),
            any::<i64>().prop_map(|x| ScalarValue::TimestampMicrosecond(Some(x), None)),
            any::<i64>().prop_map(|x| ScalarValue::TimestampNanosecond(Some(x), None)),
            any::<f64>().prop_map(|x| ScalarValue::Float64(Some(x))),
            Just(ScalarValue::Utf8(None)),
            Just(ScalarValue::Null),
        ]
    }

    fn check<T>(r: Result<T>) {
        if let Err(e) = r {
            assert!(
                !e.to_string().trim().is_empty(),
                "an error without a message"
            );
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig {
            cases: cases(),
            failure_persistence: None,
            ..ProptestConfig::default()
        })]

        #[test]
        fn args_never_panic(
            raw in prop::collection::vec(scalar(), 0..5),
            victim in proptest::option::of(text()),
        ) {
            // What Args::parse does with each evaluated argument.
            let mut positional = Vec::new();
            let mut options = Vec::new();
            for v in raw {
                if let ScalarValue::Utf8(Some(s)) | ScalarValue::Utf8View(Some(s)) = &v {
                    if let Some(kv) = option(s) {
                        prop_assert!(OPTIONS.contains(&kv.0.as_str()));
                        options.push(kv);
                        continue;
                    }
                    let _ = culprit_core::time::parse_time(s);
                }
                positional.push(v);
            }
            let args = Args { function: "culprits", positional, options };
            check(args.max_positional(3, "culprits(victim [, from, to])"));
            for i in 0..4 {
                check(args.text(i));
                check(args.time(i));
            }
            check(args.no_options());
            check(args.blame_options(victim.map(|v| vec![v]), 1, 2));
        }
    }
}
