//! The adapter of the method's float formulas (`ratp`, `ratp_blocked`,
//! `ratp_max`, `slowdown`, each in its own file) to SQL scalar functions:
//! NULL where undefined (zero acquired, zero capacity), never an error,
//! never NaN.

use std::sync::Arc;

use datafusion::arrow::array::{Array, ArrayRef, AsArray, Float64Array};
use datafusion::arrow::datatypes::{DataType, Float64Type};
use datafusion::common::Result;
use datafusion::logical_expr::{
    ColumnarValue, ScalarFunctionArgs, ScalarUDF, ScalarUDFImpl, Signature, Volatility,
};

/// A scalar function of the method over float arguments: NULL where an
/// argument is NULL or the value is undefined.
#[derive(Debug)]
pub struct FloatScalar {
    name: &'static str,
    eval: fn(&[f64]) -> Option<f64>,
    signature: Signature,
}

// A function is known by its name (function pointers have no meaningful
// equality): DataFusion compares functions to deduplicate and cache plans.
impl PartialEq for FloatScalar {
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name && self.signature == other.signature
    }
}

impl Eq for FloatScalar {}

impl std::hash::Hash for FloatScalar {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.name.hash(state);
        self.signature.hash(state);
    }
}

impl FloatScalar {
    /// The function `name` of `arity` float arguments.
    pub fn udf(name: &'static str, arity: usize, eval: fn(&[f64]) -> Option<f64>) -> ScalarUDF {
        ScalarUDF::new_from_impl(FloatScalar {
            name,
            eval,
            signature: Signature::uniform(arity, vec![DataType::Float64], Volatility::Immutable),
        })
    }
}

impl ScalarUDFImpl for FloatScalar {
    fn name(&self) -> &str {
        self.name
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
                (self.eval)(&row)
            })
            .collect();
        Ok(ColumnarValue::Array(Arc::new(out) as ArrayRef))
    }
}
