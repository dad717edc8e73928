//! Converts raw input columns (whatever type a file gave) into the canonical
//! column types, with a reason for every value that does not convert.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, AsArray, Float64Array, StringArray, TimestampMicrosecondArray,
};
use arrow::compute::cast;
use arrow::datatypes::{DataType, Int64Type};
use culprit_core::schema::ColumnKind;
use culprit_core::time::parse_time;

/// A converted column and, per row, why a non-null input value was unusable.
pub struct Converted {
    pub array: ArrayRef,
    pub errors: Vec<(usize, String)>,
}

/// Converts a raw column (`name`, for messages) to the canonical type of
/// `kind`. An error rejects the whole column; a value that does not convert
/// becomes NULL, with its row's reason in `errors`.
pub fn convert(raw: &ArrayRef, kind: ColumnKind, name: &str) -> Result<Converted, String> {
    match kind {
        ColumnKind::Str => to_text(raw, name).map(|array| Converted {
            array,
            errors: Vec::new(),
        }),
        ColumnKind::Float => to_float(raw, name),
        ColumnKind::Time => to_time(raw, name),
    }
}

fn to_text(raw: &ArrayRef, name: &str) -> Result<ArrayRef, String> {
    cast(raw, &DataType::Utf8).map_err(|e| format!("column {name}: cannot read as text: {e}"))
}

fn to_float(raw: &ArrayRef, name: &str) -> Result<Converted, String> {
    let dt = raw.data_type();
    if dt.is_numeric() {
        let array = cast(raw, &DataType::Float64).map_err(|e| format!("column {name}: {e}"))?;
        let errors = non_finite(&array, name);
        return Ok(Converted { array, errors });
    }
    let text = to_text(raw, name)?;
    let text = text.as_string::<i32>();
    let mut errors = Vec::new();
    let values: Float64Array = text
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let v = v?.trim();
            if v.is_empty() {
                return None;
            }
            match v.parse::<f64>() {
                Ok(x) if x.is_finite() => Some(x),
                _ => {
                    errors.push((i, format!("{name} is not a finite number: '{v}'")));
                    None
                }
            }
        })
        .collect();
    Ok(Converted {
        array: Arc::new(values),
        errors,
    })
}

fn non_finite(array: &ArrayRef, name: &str) -> Vec<(usize, String)> {
    let a = array.as_primitive::<arrow::datatypes::Float64Type>();
    a.iter()
        .enumerate()
        .filter_map(|(i, v)| match v {
            Some(x) if !x.is_finite() => Some((i, format!("{name} is not a finite number: {x}"))),
            _ => None,
        })
        .collect()
}

/// Converts a column to times. Timestamps and dates are cast; numbers are
/// epoch milliseconds; anything else is read as text (RFC 3339, or epoch
/// milliseconds written as text).
fn to_time(raw: &ArrayRef, name: &str) -> Result<Converted, String> {
    match raw.data_type() {
        DataType::Timestamp(_, _) | DataType::Date32 | DataType::Date64 => {
            let target = culprit_core::schema::timestamp_type();
            let array = cast(raw, &target).map_err(|e| format!("column {name}: {e}"))?;
            Ok(Converted {
                array,
                errors: Vec::new(),
            })
        }
        DataType::Int8
        | DataType::Int16
        | DataType::Int32
        | DataType::Int64
        | DataType::UInt8
        | DataType::UInt16
        | DataType::UInt32
        | DataType::UInt64 => time_from_integer_ms(raw, name),
        DataType::Float32 | DataType::Float64 => time_from_float_ms(raw, name),
        _ => time_from_text(raw, name),
    }
}

/// Times from integer epoch milliseconds; a value whose microseconds do not
/// fit in 64 bits is rejected.
fn time_from_integer_ms(raw: &ArrayRef, name: &str) -> Result<Converted, String> {
    let ms = cast(raw, &DataType::Int64).map_err(|e| format!("column {name}: {e}"))?;
    let ms = ms.as_primitive::<Int64Type>();
    let mut errors = Vec::new();
    let values: TimestampMicrosecondArray = ms
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let v = v?;
            let us = v.checked_mul(1000);
            if us.is_none() {
                errors.push((i, format!("{name} is out of range: {v}")));
            }
            us
        })
        .collect();
    Ok(times(values, errors))
}

/// Times from fractional epoch milliseconds, rounded to the microsecond; a
/// value that is not finite or too large for a time is rejected.
fn time_from_float_ms(raw: &ArrayRef, name: &str) -> Result<Converted, String> {
    let ms = cast(raw, &DataType::Float64).map_err(|e| format!("column {name}: {e}"))?;
    let ms = ms.as_primitive::<arrow::datatypes::Float64Type>();
    let mut errors = Vec::new();
    let values: TimestampMicrosecondArray = ms
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let v = v?;
            if v.is_finite() && v.abs() < 9.0e15 {
                Some((v * 1000.0).round() as i64)
            } else {
                errors.push((i, format!("{name} is not a valid epoch time: {v}")));
                None
            }
        })
        .collect();
    Ok(times(values, errors))
}

/// Times from text; blank text is NULL, text that is no time is rejected.
fn time_from_text(raw: &ArrayRef, name: &str) -> Result<Converted, String> {
    let text = to_text(raw, name)?;
    let text: &StringArray = text.as_string::<i32>();
    let mut errors = Vec::new();
    let values: TimestampMicrosecondArray = text
        .iter()
        .enumerate()
        .map(|(i, v)| {
            let v = v?.trim();
            if v.is_empty() {
                return None;
            }
            match parse_time(v) {
                Some(us) => Some(us),
                None => {
                    errors.push((
                        i,
                        format!(
                            "{name} is not a time (RFC 3339 text or epoch milliseconds): '{v}'"
                        ),
                    ));
                    None
                }
            }
        })
        .collect();
    Ok(times(values, errors))
}

/// Converted times, in UTC like every time column.
fn times(values: TimestampMicrosecondArray, errors: Vec<(usize, String)>) -> Converted {
    Converted {
        array: Arc::new(values.with_timezone("UTC")),
        errors,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Int64Array, TimestampMillisecondArray};

    #[test]
    fn times_from_numbers_and_timestamps() {
        let raw: ArrayRef = Arc::new(Int64Array::from(vec![Some(1500), None]));
        let c = convert(&raw, ColumnKind::Time, "t").unwrap();
        let a = c
            .array
            .as_primitive::<arrow::datatypes::TimestampMicrosecondType>();
        assert_eq!(a.value(0), 1_500_000);
        assert!(a.is_null(1));

        let raw: ArrayRef = Arc::new(TimestampMillisecondArray::from(vec![3000]));
        let c = convert(&raw, ColumnKind::Time, "t").unwrap();
        let a = c
            .array
            .as_primitive::<arrow::datatypes::TimestampMicrosecondType>();
        assert_eq!(a.value(0), 3_000_000);
    }

    #[test]
    fn floats_report_bad_text() {
        let raw: ArrayRef = Arc::new(StringArray::from(vec![Some("1.5"), Some("x"), None]));
        let c = convert(&raw, ColumnKind::Float, "blocked").unwrap();
        assert_eq!(c.errors.len(), 1);
        assert_eq!(c.errors[0].0, 1);
        assert!(c.errors[0].1.contains("blocked is not a finite number"));
        let a = c.array.as_primitive::<arrow::datatypes::Float64Type>();
        assert_eq!(a.value(0), 1.5);
        assert!(a.is_null(1));
    }
}
