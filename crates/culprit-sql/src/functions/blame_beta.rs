//! `blame_beta(victim_blocked, victim_acquired, culprit_acquired,
//! victim_run_seconds)`: the aggregate `beta(c -> v)` of method.md section 4
//! (001 eq. 12, time-weighted) over aligned window rows, for users who write
//! their own joins. Rows where the victim acquired nothing add nothing.

use std::sync::Arc;

use culprit_core::method::BetaAcc;
use datafusion::arrow::array::{Array, ArrayRef, AsArray};
use datafusion::arrow::datatypes::{DataType, Float64Type};
use datafusion::common::{Result, ScalarValue};
use datafusion::logical_expr::{create_udaf, Accumulator, AggregateUDF, Volatility};

#[derive(Debug, Default)]
struct Beta(BetaAcc);

impl Accumulator for Beta {
    fn update_batch(&mut self, values: &[ArrayRef]) -> Result<()> {
        let c: Vec<_> = values
            .iter()
            .map(|v| v.as_primitive::<Float64Type>())
            .collect();
        for i in 0..values[0].len() {
            if c.iter().any(|a| a.is_null(i)) {
                continue;
            }
            self.0
                .add(c[0].value(i), c[1].value(i), c[2].value(i), c[3].value(i));
        }
        Ok(())
    }

    fn evaluate(&mut self) -> Result<ScalarValue> {
        Ok(ScalarValue::Float64(Some(self.0.sum)))
    }

    fn size(&self) -> usize {
        std::mem::size_of_val(self)
    }

    fn state(&mut self) -> Result<Vec<ScalarValue>> {
        Ok(vec![ScalarValue::Float64(Some(self.0.sum))])
    }

    fn merge_batch(&mut self, states: &[ArrayRef]) -> Result<()> {
        let s = states[0].as_primitive::<Float64Type>();
        self.0.sum += s.iter().flatten().sum::<f64>();
        Ok(())
    }
}

pub fn udaf() -> AggregateUDF {
    create_udaf(
        "blame_beta",
        vec![DataType::Float64; 4],
        Arc::new(DataType::Float64),
        Volatility::Immutable,
        Arc::new(|_| Ok(Box::new(Beta::default()))),
        Arc::new(vec![DataType::Float64]),
    )
}
