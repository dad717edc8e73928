//! Rows of several batches gathered into one, in a given order: what
//! `arrow`'s `interleave_record_batch` does, with text, 64-bit numbers,
//! times and 32-bit unsigned numbers copied run by run. A write's rows
//! come in runs of consecutive rows of one input batch (window rows
//! sorted by start keep a task's rows of one window together: runs of
//! four rows in generated data), and copying a run at once spares a call
//! (text) or a lookup (numbers) per row: `interleave`'s gather of text and
//! its copies were about 12% of an ingest's time in a profile, that of
//! numbers 7% (docs/performance.md). Numbers and NULLs of short runs are
//! copied value by value (a call of `memmove` or of a bit copy per run of
//! four cost more than the copy), and a column NULL in every row is made
//! without a copy. Where `interleave` would panic (a row outside its
//! batch, no batch), this is an error.

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, ArrowPrimitiveType, AsArray, BooleanBufferBuilder, PrimitiveArray, StringArray,
};
use arrow::buffer::{Buffer, NullBuffer, OffsetBuffer, ScalarBuffer};
use arrow::datatypes::{
    DataType, Float64Type, Int64Type, TimeUnit, TimestampMicrosecondType, UInt32Type,
};
use arrow::error::ArrowError;
use arrow::record_batch::RecordBatch;

/// The rows `rows` (batch, row) of `batches`, in that order, as one batch
/// of the first batch's schema: the batch
/// `arrow::compute::interleave_record_batch` gives. Every batch must have
/// the first one's columns, of the same types (a time's zone too), as
/// `interleave` requires: otherwise an error, as for no batch at all or
/// a row outside its batch.
pub(crate) fn gather(
    batches: &[&RecordBatch],
    rows: &[(usize, usize)],
) -> Result<RecordBatch, ArrowError> {
    let Some(first) = batches.first() else {
        return Err(ArrowError::InvalidArgumentError(
            "no batch to gather rows from".into(),
        ));
    };
    for (b, batch) in batches.iter().enumerate() {
        let same = batch.num_columns() == first.num_columns()
            && batch
                .columns()
                .iter()
                .zip(first.columns())
                .all(|(x, y)| x.data_type() == y.data_type());
        if !same {
            return Err(ArrowError::InvalidArgumentError(format!(
                "batch {b} has other columns than the first batch: its rows cannot be gathered \
                 with them"
            )));
        }
    }
    let runs = runs(batches, rows)?;
    let columns = (0..first.num_columns())
        .map(|c| {
            let arrays: Vec<&dyn Array> = batches.iter().map(|b| b.column(c).as_ref()).collect();
            // Every batch's column is of this type (checked above): the
            // casts below cannot fail.
            let data_type = first.column(c).data_type();
            if arrays.iter().all(|a| a.null_count() == a.len()) {
                // Every row NULL (a column no input fills).
                return Ok(arrow::array::new_null_array(data_type, rows.len()));
            }
            match data_type {
                DataType::Utf8 => {
                    let texts: Vec<&StringArray> =
                        arrays.iter().map(|a| a.as_string::<i32>()).collect();
                    match text_by_runs(&texts, &runs, rows.len())? {
                        Some(column) => Ok(column),
                        None => arrow::compute::interleave(&arrays, rows),
                    }
                }
                DataType::Int64 => Ok(numbers_by_runs::<Int64Type>(
                    &arrays,
                    &runs,
                    rows.len(),
                    data_type,
                )),
                DataType::Float64 => Ok(numbers_by_runs::<Float64Type>(
                    &arrays,
                    &runs,
                    rows.len(),
                    data_type,
                )),
                DataType::UInt32 => Ok(numbers_by_runs::<UInt32Type>(
                    &arrays,
                    &runs,
                    rows.len(),
                    data_type,
                )),
                DataType::Timestamp(TimeUnit::Microsecond, _) => {
                    Ok(numbers_by_runs::<TimestampMicrosecondType>(
                        &arrays,
                        &runs,
                        rows.len(),
                        data_type,
                    ))
                }
                _ => arrow::compute::interleave(&arrays, rows),
            }
        })
        .collect::<Result<Vec<ArrayRef>, ArrowError>>()?;
    // As `interleave_record_batch` makes it (a batch of no column is an
    // error there too).
    RecordBatch::try_new(first.schema(), columns)
}

/// Runs of at most this many rows are copied value by value.
const SHORT_RUN: usize = 8;

/// A run of rows: (batch, first row, rows).
type Run = (usize, usize, usize);

/// `rows` as runs of consecutive rows of one batch, each row checked to
/// be in its batch (`interleave` would panic).
fn runs(batches: &[&RecordBatch], rows: &[(usize, usize)]) -> Result<Vec<Run>, ArrowError> {
    let mut runs: Vec<Run> = Vec::new();
    for &(b, r) in rows {
        if batches.get(b).is_none_or(|batch| r >= batch.num_rows()) {
            return Err(ArrowError::InvalidArgumentError(format!(
                "row {r} of batch {b} is not among the rows gathered"
            )));
        }
        match runs.last_mut() {
            Some((lb, first, n)) if *lb == b && *first + *n == r => *n += 1,
            _ => runs.push((b, r, 1)),
        }
    }
    Ok(runs)
}

/// The numbers of `runs` of `arrays` (each of type `T`), `len` rows, of
/// `data_type` (every array's: a time's zone).
fn numbers_by_runs<T: ArrowPrimitiveType>(
    arrays: &[&dyn Array],
    runs: &[Run],
    len: usize,
    data_type: &DataType,
) -> ArrayRef {
    let arrays: Vec<&PrimitiveArray<T>> = arrays.iter().map(|a| a.as_primitive::<T>()).collect();
    let mut values: Vec<T::Native> = Vec::with_capacity(len);
    let mut nulls = nulls_of(&arrays, len);
    for &(b, first, n) in runs {
        let a = arrays[b];
        let run = &a.values()[first..first + n];
        if n <= SHORT_RUN {
            // A call of `memmove` per short run cost more than the copy.
            for v in run {
                values.push(*v);
            }
        } else {
            values.extend_from_slice(run);
        }
        if let Some(built) = nulls.as_mut() {
            append_nulls(built, a.nulls(), first, n);
        }
    }
    let nulls = nulls.map(|mut b| NullBuffer::new(b.finish()));
    Arc::new(
        PrimitiveArray::<T>::new(ScalarBuffer::from(values), nulls)
            .with_data_type(data_type.clone()),
    )
}

/// A builder of the gathered rows' validity, if any array has a NULL.
fn nulls_of<A: Array>(arrays: &[&A], len: usize) -> Option<BooleanBufferBuilder> {
    arrays
        .iter()
        .any(|a| a.null_count() > 0)
        .then(|| BooleanBufferBuilder::new(len))
}

/// Appends the validity of `n` rows from `first` of an array with
/// `valid` (none: every row valid).
fn append_nulls(
    built: &mut BooleanBufferBuilder,
    valid: Option<&NullBuffer>,
    first: usize,
    n: usize,
) {
    match valid {
        Some(valid) if n <= SHORT_RUN => {
            for at in first..first + n {
                built.append(valid.is_valid(at));
            }
        }
        Some(valid) => {
            let at = valid.offset() + first;
            built.append_packed_range(at..at + n, valid.validity());
        }
        None => built.append_n(n, true),
    }
}

/// The text of `runs` of `arrays`, `len` rows; `None` when it would not
/// fit 32-bit offsets (then `interleave` reports it).
fn text_by_runs(
    arrays: &[&StringArray],
    runs: &[Run],
    len: usize,
) -> Result<Option<ArrayRef>, ArrowError> {
    let mut bytes = 0usize;
    for &(b, first, n) in runs {
        let offsets = arrays[b].value_offsets();
        bytes += (offsets[first + n] - offsets[first]) as usize;
    }
    if i32::try_from(bytes).is_err() {
        return Ok(None);
    }
    let mut offsets: Vec<i32> = Vec::with_capacity(len + 1);
    offsets.push(0);
    let mut values: Vec<u8> = Vec::with_capacity(bytes);
    let mut nulls = nulls_of(arrays, len);
    for &(b, first, n) in runs {
        let a = arrays[b];
        let from = a.value_offsets();
        let (lo, hi) = (from[first], from[first + n]);
        // Fits: the total was checked above.
        let shift = values.len() as i32 - lo;
        values.extend_from_slice(&a.value_data()[lo as usize..hi as usize]);
        offsets.extend(from[first + 1..=first + n].iter().map(|o| o + shift));
        if let Some(built) = nulls.as_mut() {
            append_nulls(built, a.nulls(), first, n);
        }
    }
    let offsets = OffsetBuffer::new(ScalarBuffer::from(offsets));
    let nulls = nulls.map(|mut b| NullBuffer::new(b.finish()));
    // Checked again (UTF-8, offsets): `interleave` skips that with unsafe
    // code, which this project keeps out; the gain measured with runs
    // (docs/performance.md) is net of the check.
    let text = StringArray::try_new(offsets, Buffer::from_vec(values), nulls)?;
    Ok(Some(Arc::new(text)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use arrow::array::{Float64Array, Int64Array};
    use arrow::datatypes::{Field, Schema};

    fn batch(ids: Vec<Option<&str>>, tag: &str, start: i64) -> RecordBatch {
        let n = ids.len();
        let schema = Arc::new(Schema::new(vec![
            Field::new("id", DataType::Utf8, true),
            Field::new("tag", DataType::Utf8, false),
            Field::new("at", DataType::Int64, false),
            Field::new("amount", DataType::Float64, true),
            Field::new(
                "when",
                DataType::Timestamp(TimeUnit::Microsecond, Some("UTC".into())),
                true,
            ),
            Field::new("key", DataType::UInt32, true),
        ]));
        RecordBatch::try_new(
            schema,
            vec![
                Arc::new(StringArray::from(ids)),
                Arc::new(StringArray::from(vec![tag; n])),
                Arc::new(Int64Array::from_iter_values(start..start + n as i64)),
                Arc::new(Float64Array::from_iter(
                    (0..n).map(|i| (i % 3 != 0).then_some(i as f64 * 0.5)),
                )),
                Arc::new(
                    arrow::array::TimestampMicrosecondArray::from_iter(
                        (0..n).map(|i| (i % 2 == 0).then_some(start * 1_000 + i as i64)),
                    )
                    .with_timezone("UTC"),
                ),
                Arc::new(arrow::array::UInt32Array::from_iter(
                    (0..n).map(|i| (i != 1).then_some(start as u32 + i as u32)),
                )),
            ],
        )
        .unwrap()
    }

    /// Gathered rows are the rows named, in order, with their NULLs and
    /// their columns' types (a time's zone): the same batch as `arrow`'s
    /// own interleave gives, over runs of every
    /// length, single rows, rows taken twice and backwards, empty text,
    /// batches sliced (offsets not from zero) and batches with no NULL
    /// text beside one with some.
    #[test]
    fn gathers_the_rows_named_as_interleave_does() {
        let a = batch(
            vec![
                Some("t-1"),
                None,
                Some(""),
                Some("t-22"),
                Some("t-333"),
                None,
                Some("é"),
            ],
            "a",
            0,
        );
        let b = batch(
            vec![Some("u-1"), Some("u-2"), Some("u-3"), Some("")],
            "bb",
            100,
        );
        let whole = batch(
            vec![
                Some("x"),
                Some("v-1"),
                None,
                Some("v-3"),
                Some("v-4"),
                Some("y"),
            ],
            "c",
            200,
        );
        let c = whole.slice(1, 4);
        let batches = [&a, &b, &c];
        let rows = vec![
            (0, 2),
            (0, 3),
            (0, 4),
            (1, 0),
            (1, 1),
            (2, 0),
            (2, 1),
            (2, 2),
            (2, 3),
            (0, 0),
            (0, 1),
            (0, 1),
            (1, 3),
            (0, 6),
            (0, 5),
            (2, 1),
            (1, 2),
            (1, 1),
        ];
        let ours = gather(&batches, &rows).unwrap();
        let theirs = arrow::compute::interleave_record_batch(&batches, &rows).unwrap();
        assert_eq!(ours, theirs);
        // And against the input, by hand.
        let ids = ours.column(0).as_string::<i32>();
        let want = [
            Some(""),
            Some("t-22"),
            Some("t-333"),
            Some("u-1"),
            Some("u-2"),
            Some("v-1"),
            None,
            Some("v-3"),
            Some("v-4"),
            Some("t-1"),
            None,
            None,
            Some(""),
            Some("é"),
            None,
            None,
            Some("u-3"),
            Some("u-2"),
        ];
        let got: Vec<Option<&str>> = ids.iter().collect();
        assert_eq!(got, want);
        // Nothing, and one batch whole in its order.
        assert_eq!(gather(&batches, &[]).unwrap().num_rows(), 0);
        let all: Vec<(usize, usize)> = (0..a.num_rows()).map(|r| (0, r)).collect();
        assert_eq!(gather(&batches, &all).unwrap(), a);
    }

    /// A row outside its batch, no batch at all, and batches whose
    /// columns differ (in type, in a time's zone, in number) are errors,
    /// not a panic nor rows relabelled.
    /// A column NULL in every row of every batch (a `detail` no input
    /// fills) gathers as interleave gives it, sliced batches too; a NULL
    /// in only some batches takes the runs' way.
    #[test]
    fn a_column_null_everywhere_gathers_as_interleave_does() {
        let a = batch(vec![None, None, None], "a", 0);
        let whole = batch(vec![None, None, None, None, None], "b", 10);
        let b = whole.slice(1, 3);
        let rows = vec![(1, 2), (0, 0), (0, 1), (1, 0), (1, 1), (0, 2)];
        let ours = gather(&[&a, &b], &rows).unwrap();
        assert_eq!(
            ours,
            arrow::compute::interleave_record_batch(&[&a, &b], &rows).unwrap()
        );
        assert_eq!(ours.column(0).null_count(), rows.len());
        assert_eq!(ours.column(0).data_type(), &DataType::Utf8);
        let c = batch(vec![Some("t-1"), None], "c", 20);
        let rows = vec![(1, 0), (2, 0), (0, 1), (2, 1)];
        let ours = gather(&[&a, &b, &c], &rows).unwrap();
        let theirs = arrow::compute::interleave_record_batch(&[&a, &b, &c], &rows).unwrap();
        assert_eq!(ours, theirs);
        assert_eq!(ours.column(0).null_count(), 3);
    }

    #[test]
    fn what_interleave_refuses_or_panics_on_is_an_error() {
        let a = batch(vec![Some("t")], "a", 0);
        assert!(gather(&[&a], &[(0, 1)]).is_err());
        assert!(gather(&[&a], &[(1, 0)]).is_err());
        assert!(gather(&[], &[]).is_err());
        let column = |b: &RecordBatch, c: usize, array: ArrayRef| {
            let mut columns = b.columns().to_vec();
            columns[c] = array;
            let mut fields: Vec<Field> = b
                .schema()
                .fields()
                .iter()
                .map(|f| f.as_ref().clone())
                .collect();
            fields[c] = Field::new(fields[c].name(), columns[c].data_type().clone(), true);
            RecordBatch::try_new(Arc::new(Schema::new(fields)), columns).unwrap()
        };
        let numbers = column(&a, 0, Arc::new(Int64Array::from(vec![1])));
        let other_zone = column(
            &a,
            4,
            Arc::new(
                arrow::array::TimestampMicrosecondArray::from(vec![0]).with_timezone("+01:00"),
            ),
        );
        let fewer = a.project(&[0, 1, 2]).unwrap();
        for other in [&numbers, &other_zone] {
            assert!(gather(&[&a, other], &[(0, 0), (1, 0)]).is_err());
            assert!(
                arrow::compute::interleave_record_batch(&[&a, other], &[(0, 0), (1, 0)]).is_err()
            );
        }
        // (`interleave` panics on this one.)
        assert!(gather(&[&a, &fewer], &[(0, 0), (1, 0)]).is_err());
    }

    /// Long runs of a batch sliced past a byte of validity: the bits of
    /// each run taken from where the slice starts.
    #[test]
    fn long_runs_of_a_sliced_batch_keep_their_nulls() {
        let texts: Vec<Option<String>> = (0..300)
            .map(|i| (i % 7 != 3).then(|| format!("r-{i}")))
            .collect();
        let whole = batch(texts.iter().map(|t| t.as_deref()).collect(), "w", 0);
        let sliced = whole.slice(13, 250);
        let other = batch(vec![Some("o-1"), None], "o", 1000);
        let mut rows: Vec<(usize, usize)> = (5..140).map(|r| (0, r)).collect();
        rows.push((1, 1));
        rows.extend((140..250).map(|r| (0, r)));
        rows.push((1, 0));
        rows.extend((0..5).map(|r| (0, r)));
        let ours = gather(&[&sliced, &other], &rows).unwrap();
        let ids = ours.column(0).as_string::<i32>();
        for (at, &(b, r)) in rows.iter().enumerate() {
            let want = match b {
                0 => texts[13 + r].as_deref(),
                _ => [Some("o-1"), None][r],
            };
            assert_eq!(ids.is_valid(at).then(|| ids.value(at)), want, "row {at}");
        }
        let theirs = arrow::compute::interleave_record_batch(&[&sliced, &other], &rows).unwrap();
        assert_eq!(ours, theirs);
    }
}
