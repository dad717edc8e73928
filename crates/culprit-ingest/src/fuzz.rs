//! Fuzz targets: the Spark event-log reader (every codec and framing, then
//! the parser) and the interchange readers (CSV, JSON lines, Parquet), each
//! a function of arbitrary bytes that must return, never panic, within the
//! decode cap. They are driven by proptest below (cargo-fuzz would need a
//! second, instrumented nightly build of arrow and parquet, more than CI's
//! time allows); a cargo-fuzz target can call the same functions.

use bytes::Bytes;

use crate::formats::{self, Format};
use crate::spark;

/// The decode cap the targets run under.
pub const FUZZ_CAP: usize = 8 << 20;

/// One event-log file: decoded (the codec from its magic bytes or its
/// name) and parsed. Returns whether it decoded.
pub fn event_log(name: &str, bytes: &[u8]) -> bool {
    let bytes = Bytes::copy_from_slice(bytes);
    match spark::decode(name, &bytes, FUZZ_CAP) {
        Ok(part) => {
            assert!(part.text.len() <= FUZZ_CAP, "decoded past the cap");
            for in_progress in [false, true] {
                spark::parse(
                    std::slice::from_ref(&part),
                    spark::LogState { in_progress },
                    "fuzz",
                );
            }
            true
        }
        Err(e) => {
            assert!(!e.reason.is_empty(), "an error without a reason");
            false
        }
    }
}

/// A zip archive of logs (a History Server download).
pub fn zip(bytes: &[u8]) {
    if let Ok(entries) = spark::zip::entries(bytes, FUZZ_CAP) {
        assert!(entries.iter().map(|(_, c)| c.len()).sum::<usize>() <= FUZZ_CAP);
    }
}

/// One interchange file read as each format.
pub fn interchange(bytes: &[u8]) {
    for format in [Format::Csv, Format::JsonLines, Format::Parquet] {
        if let Err(e) = formats::read(format, Bytes::copy_from_slice(bytes)) {
            assert!(!e.is_empty(), "an error without a reason");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::io::Write;

    fn cases(default: u32) -> u32 {
        std::env::var("CULPRIT_FUZZ_CASES")
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    }

    /// A small real-looking event log.
    fn log_text() -> Vec<u8> {
        let mut t = String::new();
        t.push_str(r#"{"Event":"SparkListenerLogStart","Spark Version":"3.5.3"}"#);
        t.push('\n');
        t.push_str(r#"{"Event":"SparkListenerApplicationStart","App Name":"fuzz","App ID":"app-1","Timestamp":1700000000000,"User":"u"}"#);
        t.push('\n');
        t.push_str(r#"{"Event":"SparkListenerJobStart","Job ID":0,"Submission Time":1700000000100,"Stage Infos":[{"Stage ID":0,"Stage Attempt ID":0,"Stage Name":"s","Number of Tasks":2,"RDD Info":[],"Parent IDs":[],"Details":""}],"Stage IDs":[0],"Properties":{}}"#);
        t.push('\n');
        t.push_str(r#"{"Event":"SparkListenerStageSubmitted","Stage Info":{"Stage ID":0,"Stage Attempt ID":0,"Stage Name":"s","Number of Tasks":2,"RDD Info":[],"Parent IDs":[],"Details":"","Submission Time":1700000000100}}"#);
        t.push('\n');
        for (i, host) in ["h1", "h2"].iter().enumerate() {
            t.push_str(&format!(r#"{{"Event":"SparkListenerTaskEnd","Stage ID":0,"Stage Attempt ID":0,"Task Type":"ResultTask","Task End Reason":{{"Reason":"Success"}},"Task Info":{{"Task ID":{i},"Index":{i},"Attempt":0,"Launch Time":1700000000200,"Executor ID":"{i}","Host":"{host}","Locality":"PROCESS_LOCAL","Speculative":false,"Getting Result Time":0,"Finish Time":1700000001200,"Failed":false,"Killed":false,"Accumulables":[]}},"Task Metrics":{{"Executor Deserialize Time":5,"Executor Run Time":900,"Executor CPU Time":800000000,"JVM GC Time":10,"Result Serialization Time":1,"Shuffle Read Metrics":{{"Fetch Wait Time":3,"Remote Bytes Read":10,"Local Bytes Read":5}},"Shuffle Write Metrics":{{"Shuffle Bytes Written":7,"Shuffle Write Time":1000}},"Input Metrics":{{"Bytes Read":100,"Records Read":10}}}}}}"#));
            t.push('\n');
        }
        t.push_str(r#"{"Event":"SparkListenerStageCompleted","Stage Info":{"Stage ID":0,"Stage Attempt ID":0,"Stage Name":"s","Number of Tasks":2,"RDD Info":[],"Parent IDs":[],"Details":"","Submission Time":1700000000100,"Completion Time":1700000001300}}"#);
        t.push('\n');
        t.push_str(r#"{"Event":"SparkListenerJobEnd","Job ID":0,"Completion Time":1700000001300,"Job Result":{"Result":"JobSucceeded"}}"#);
        t.push('\n');
        t.push_str(r#"{"Event":"SparkListenerApplicationEnd","Timestamp":1700000001400}"#);
        t.push('\n');
        t.into_bytes()
    }

    fn zstd_of(b: &[u8]) -> Vec<u8> {
        zstd::stream::encode_all(b, 3).unwrap()
    }

    fn gzip_of(b: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        e.write_all(b).unwrap();
        e.finish().unwrap()
    }

    fn lz4_java_of(b: &[u8]) -> Vec<u8> {
        let block = lz4_flex::block::compress(b);
        let sum = twox_hash::XxHash32::oneshot(0x9747_b28c, b) & 0x0fff_ffff;
        let mut out = b"LZ4Block".to_vec();
        out.push(0x20 | 4);
        out.extend_from_slice(&(block.len() as u32).to_le_bytes());
        out.extend_from_slice(&(b.len() as u32).to_le_bytes());
        out.extend_from_slice(&sum.to_le_bytes());
        out.extend_from_slice(&block);
        out
    }

    fn snappy_java_of(b: &[u8]) -> Vec<u8> {
        let chunk = snap::raw::Encoder::new().compress_vec(b).unwrap();
        let mut out = b"\x82SNAPPY\x00".to_vec();
        out.extend_from_slice(&1u32.to_be_bytes());
        out.extend_from_slice(&1u32.to_be_bytes());
        out.extend_from_slice(&(chunk.len() as u32).to_be_bytes());
        out.extend_from_slice(&chunk);
        out
    }

    fn lzf_of(b: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        for c in b.chunks(0xffff) {
            out.extend_from_slice(&[b'Z', b'V', 0]);
            out.extend_from_slice(&(c.len() as u16).to_be_bytes());
            out.extend_from_slice(c);
        }
        out
    }

    /// (file name, bytes) seeds: the log in every codec.
    fn log_seeds() -> Vec<(&'static str, Vec<u8>)> {
        let t = log_text();
        vec![
            ("app-1", t.clone()),
            ("app-1.zstd", zstd_of(&t)),
            ("app-1.gz", gzip_of(&t)),
            ("app-1.lz4", lz4_java_of(&t)),
            ("app-1.snappy", snappy_java_of(&t)),
            ("app-1.lzf", lzf_of(&t)),
        ]
    }

    fn mutate(mut b: Vec<u8>, ops: &[(u8, usize, u8)]) -> Vec<u8> {
        for &(op, at, v) in ops {
            if b.is_empty() {
                b.push(v);
                continue;
            }
            let at = at % b.len();
            match op % 6 {
                0 => b[at] ^= 1 << (v % 8),
                1 => b[at] = v,
                2 => b.truncate(at),
                3 => {
                    let n = (v as usize % 16).min(b.len() - at);
                    b.drain(at..at + n);
                }
                4 => {
                    // An extreme little- or big-endian length field.
                    let x = [0xff, 0xff, 0xff, 0x7f];
                    for (i, y) in x.iter().enumerate() {
                        if at + i < b.len() {
                            b[at + i] = *y;
                        }
                    }
                }
                _ => {
                    let n = (v as usize % 32).min(b.len() - at);
                    let copy = b[at..at + n].to_vec();
                    b.splice(at..at, copy);
                }
            }
        }
        b
    }

    fn ops() -> impl Strategy<Value = Vec<(u8, usize, u8)>> {
        prop::collection::vec((any::<u8>(), any::<usize>(), any::<u8>()), 1..6)
    }

    #[test]
    fn seeds_decode_and_parse() {
        for (name, bytes) in log_seeds() {
            assert!(event_log(name, &bytes), "{name}");
            let part = spark::decode(name, &Bytes::from(bytes), FUZZ_CAP).unwrap();
            assert_eq!(&part.text[..], &log_text()[..], "{name}");
        }
    }

    fn config(default: u32) -> ProptestConfig {
        ProptestConfig {
            cases: cases(default),
            failure_persistence: None,
            ..ProptestConfig::default()
        }
    }

    // Each target's fixed budget runs about 15 s in release mode on the
    // project's 2-core machine; CULPRIT_FUZZ_CASES runs longer.
    proptest! {
        #![proptest_config(config(150_000))]
        #[test]
        fn fuzz_event_log_mutated(seed in 0usize..6, ops in ops()) {
            let seeds = log_seeds();
            let (name, bytes) = &seeds[seed];
            event_log(name, &mutate(bytes.clone(), &ops));
        }
    }

    proptest! {
        #![proptest_config(config(400_000))]
        #[test]
        fn fuzz_event_log_arbitrary(bytes in prop::collection::vec(any::<u8>(), 0..512), codec in 0usize..6) {
            let mut b = bytes;
            // Arbitrary bodies behind each codec's magic bytes.
            let magic: &[u8] = [&b""[..], b"LZ4Block", b"\x82SNAPPY\x00", &[0x28, 0xb5, 0x2f, 0xfd], &[0x1f, 0x8b], b"ZV"][codec];
            b.splice(0..0, magic.iter().copied());
            event_log("app-x", &b);
            zip(&b);
        }
    }

    proptest! {
        #![proptest_config(config(300_000))]
        #[test]
        fn fuzz_interchange(seed in 0usize..3, ops in ops()) {
            let seeds = interchange_seeds();
            interchange(&mutate(seeds[seed].clone(), &ops));
        }
    }

    fn interchange_seeds() -> Vec<Vec<u8>> {
        let csv = b"task_id,query_id,stage_id,host,launch_time,finish_time\nt1,q1,s1,h1,2026-01-01T00:00:00Z,2026-01-01T00:00:01Z\nt2,q1,s1,h2,1700000000000,1700000001000\n".to_vec();
        let jsonl = b"{\"task_id\":\"t1\",\"query_id\":\"q1\",\"stage_id\":\"s1\",\"host\":\"h1\",\"launch_time\":1700000000000,\"finish_time\":1700000001000}\n".to_vec();
        let parquet = {
            use arrow::array::{Int64Array, StringArray};
            use arrow::record_batch::RecordBatch;
            use std::sync::Arc;
            let batch = RecordBatch::try_from_iter([
                (
                    "task_id",
                    Arc::new(StringArray::from(vec!["t1", "t2"])) as arrow::array::ArrayRef,
                ),
                (
                    "launch_time",
                    Arc::new(Int64Array::from(vec![1_700_000_000_000i64, 2])),
                ),
            ])
            .unwrap();
            let mut out = Vec::new();
            let mut w =
                parquet::arrow::ArrowWriter::try_new(&mut out, batch.schema(), None).unwrap();
            w.write(&batch).unwrap();
            w.close().unwrap();
            out
        };
        vec![csv, jsonl, parquet]
    }

    /// Found by `fuzz_event_log_mutated`: a task row translated without its
    /// host made the row builder panic; it is a rejected row now.
    #[test]
    fn a_task_without_its_host_is_rejected_not_a_panic() {
        let text = String::from_utf8(log_text()).unwrap();
        let bad = text.replacen(r#""Host":"h1","#, "", 1);
        let part = spark::decode("app-1", &Bytes::from(bad), FUZZ_CAP).unwrap();
        let parsed = spark::parse(&[part], spark::LogState::default(), "fuzz");
        // Both tasks come through, the one without a host with a NULL host
        // for the validator to reject with its line.
        let (_, tasks) = parsed
            .tables
            .iter()
            .find(|(t, _)| *t == culprit_core::Table::Tasks)
            .expect("a tasks table");
        assert_eq!(tasks.len(), 2);
        assert_eq!(tasks.columns["host"].null_count(), 1);
    }

    #[test]
    fn interchange_seeds_read() {
        for s in interchange_seeds() {
            let ok = [Format::Csv, Format::JsonLines, Format::Parquet]
                .into_iter()
                .any(|f| formats::read(f, Bytes::from(s.clone())).is_ok());
            assert!(ok);
        }
    }
}
