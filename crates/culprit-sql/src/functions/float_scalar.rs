//! `ratp`, `ratp_blocked`, `ratp_max`, `slowdown`: method.md section 3
//! (000 §3 eq. 1, 4, 7; 001 §4 eq. 2, 10, 11). NULL where undefined (zero
//! acquired, zero capacity), never an error, never NaN.

use std::sync::Arc;

use culprit_core::ratp;
use datafusion::arrow::array::{Array, ArrayRef, AsArray, Float64Array};
use datafusion::arrow::datatypes::{DataType, Float64Type};
use datafusion::common::Result;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    /// `ratp(blocked, computed, acquired)`
    Ratp,
    /// `ratp_blocked(blocked, acquired)`
    RatpBlocked,
    /// `ratp_max(seconds, acquired)`
    RatpMax,
    /// `slowdown(ratp, capacity)`
    Slowdown,
}

/// A scalar function of the method over float arguments.
#[derive(Debug, PartialEq, Eq, Hash)]
pub struct MethodScalar {
    kind: Kind,
    signature: Signature,
}

impl MethodScalar {
    fn new(kind: Kind) -> Self {
        let arity = match kind {
            Kind::Ratp => 3,
            _ => 2,
        };
        MethodScalar {
            kind,
            signature: Signature::uniform(arity, vec![DataType::Float64], Volatility::Immutable),
        }
    }

    fn eval(&self, a: &[f64]) -> Option<f64> {
        match self.kind {
            Kind::Ratp => ratp::ratp(a[0], a[1], a[2]),
            Kind::RatpBlocked => ratp::ratp_blocked(a[0], a[1]),
            Kind::RatpMax => ratp::ratp_max(a[0], a[1]),
            Kind::Slowdown => ratp::slowdown(a[0], a[1]),
        }
    }
}

impl ScalarUDFImpl for MethodScalar {
    fn name(&self) -> &str {
        match self.kind {
            Kind::Ratp => "ratp",
            Kind::RatpBlocked => "ratp_blocked",
            Kind::RatpMax => "ratp_max",
            Kind::Slowdown => "slowdown",
        }
    }

    fn signature(&self) -> &Signature {
        &self.signature
    }

    fn return_type(&self, _arg_types: &[DataType]) -> Result<DataType> {
        Ok(DataType::Float64)
    }

    fn invoke_with_args(&self, args: ScalarFunctionArgs) -> Result<ColumnarValue> {
        let arrays = ColumnarValue::values_to_arrays(&args.args)?;
        let cols: Vec<_> = arrays
            .iter()
            .map(|a| a.as_primitive::<Float64Type>())
            .collect();
        let mut row = vec![0.0; cols.len()];
        let out: Float64Array = (0..args.number_rows)
            .map(|i| {
                for (slot, c) in row.iter_mut().zip(&cols) {
                    if c.is_null(i) {
                        return None;
                    }
                    *slot = c.value(i);
                }
                self.eval(&row)
            })
            .collect();
        Ok(ColumnarValue::Array(Arc::new(out) as ArrayRef))
    }
}

pub(crate) fn all() -> Vec<ScalarUDF> {
    [Kind::Ratp, Kind::RatpBlocked, Kind::RatpMax, Kind::Slowdown]
        .into_iter()
        .map(|k| ScalarUDF::new_from_impl(MethodScalar::new(k)))
        .collect()
}
