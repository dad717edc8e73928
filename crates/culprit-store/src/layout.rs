//! How window rows are laid out in the store so that the method can read
//! them host group by host group: every `task_windows` file written for a
//! batch holds the rows of one host bucket (the bucket of the host its task
//! ran on). The blame sweep then loads one bucket at a time, so memory holds
//! the rows of a few hosts, never the whole table (method.md section 2: hosts
//! are independent).

/// Buckets of hosts. Changing it only makes older files be read as
/// unbucketed (correct, less bounded in memory).
pub const HOST_BUCKETS: u32 = 16;

/// The bucket of a host: FNV-1a of its name, stable across versions and
/// machines (it is part of the stored layout).
pub fn host_bucket(host: &str) -> u32 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in host.bytes() {
        h ^= b as u64;
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    (h % HOST_BUCKETS as u64) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_stable_and_spread() {
        // Part of the stored layout: these values must never change.
        assert_eq!(host_bucket(""), (0xcbf2_9ce4_8422_2325u64 % 16) as u32);
        let mut seen = [0usize; HOST_BUCKETS as usize];
        for h in 0..500 {
            seen[host_bucket(&format!("host-{h:04}")) as usize] += 1;
        }
        assert!(seen.iter().all(|&n| n > 10), "{seen:?}");
    }
}
