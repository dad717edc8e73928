//! `simulate(&SimConfig::default())` is what many tests, the demo and the
//! docs rely on: its output must not change when the simulator grows. The
//! fingerprint below was taken before the simulator was generalised into
//! scenarios (`Scenario`); a change to the default workload fails here.

use arrow::array::{Array, AsArray};
use arrow::datatypes::{DataType, Float64Type, TimestampMicrosecondType};
use arrow::record_batch::RecordBatch;
use arrow::util::display::array_value_to_string;
use culprit_sim::{simulate, SimConfig, Workload};

/// FNV-1a over bytes: stable across platforms and Rust versions.
struct Fnv(u64);

impl Fnv {
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 ^= u64::from(*b);
            self.0 = self.0.wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}

/// One value as text: floats by their bits, times as epoch microseconds.
fn value(c: &dyn Array, i: usize) -> String {
    if c.is_null(i) {
        return "NULL".into();
    }
    match c.data_type() {
        DataType::Float64 => format!("{:x}", c.as_primitive::<Float64Type>().value(i).to_bits()),
        DataType::Timestamp(_, _) => c
            .as_primitive::<TimestampMicrosecondType>()
            .value(i)
            .to_string(),
        _ => array_value_to_string(c, i).unwrap(),
    }
}

/// Every value of every column, as text, in row order.
fn fingerprint(w: &Workload) -> (Vec<usize>, u64) {
    let mut h = Fnv(0xcbf2_9ce4_8422_2325);
    let mut rows = Vec::new();
    let batches: Vec<&RecordBatch> = [
        Some(&w.queries),
        Some(&w.stages),
        Some(&w.tasks),
        Some(&w.task_windows),
        Some(&w.host_windows),
        w.record_lineage.as_ref(),
        w.partition_latency.as_ref(),
    ]
    .into_iter()
    .flatten()
    .collect();
    for b in batches {
        rows.push(b.num_rows());
        for (f, c) in b.schema().fields().iter().zip(b.columns()) {
            // host_windows.scope came after the fingerprint was taken; the
            // simulator writes no slot pools, so it must be all NULL.
            if f.name() == "scope" {
                assert_eq!(c.null_count(), c.len(), "the simulator writes no scope");
                continue;
            }
            for i in 0..b.num_rows() {
                h.write(value(c.as_ref(), i).as_bytes());
                h.write(b"|");
            }
        }
        h.write(b"#");
    }
    h.write(w.victim.as_bytes());
    h.write(w.culprit.as_bytes());
    h.write(w.expensive_input.as_bytes());
    (rows, h.0)
}

#[test]
fn default_output_is_unchanged() {
    let (rows, hash) = fingerprint(&simulate(&SimConfig::default()));
    println!("rows {rows:?} hash {hash:#018x}");
    assert_eq!(rows, ROWS, "row counts of the default simulation");
    assert_eq!(hash, HASH, "values of the default simulation");
}

const ROWS: [usize; 7] = [6, 13, 91, 1686, 944, 364, 36];
const HASH: u64 = 0x43c3_6a56_b120_97ea;

/// Another seed and size, as `culprit generate --seed 7 --queries 10 --hosts 3`.
#[test]
fn other_configs_are_unchanged() {
    let cfg = SimConfig {
        seed: 7,
        queries: 10,
        hosts: 3,
        ..Default::default()
    };
    let (rows, hash) = fingerprint(&simulate(&cfg));
    println!("rows {rows:?} hash {hash:#018x}");
    assert_eq!(rows, [10, 21, 106, 1434, 864, 424, 42]);
    assert_eq!(hash, 0xce0b_b491_fe8d_a096);
}
