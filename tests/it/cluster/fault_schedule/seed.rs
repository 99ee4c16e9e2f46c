//! The fault schedule's seed: where it comes from, the generator it drives, and printing it
//! when the run fails.

use std::time::Duration;

/// splitmix64: small, seedable, good enough to pick faults.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    pub fn millis(&mut self, from: u64, to: u64) -> Duration {
        Duration::from_millis(from + self.below(to - from + 1))
    }
}

/// Prints the seed when the test fails, so the failure can be replayed.
pub struct SeedOnFailure(pub u64);

impl Drop for SeedOnFailure {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "fault schedule failed with seed {0}; replay with HERALD_FAULT_SEED={0}",
                self.0
            );
        }
    }
}

pub fn seed() -> u64 {
    match std::env::var("HERALD_FAULT_SEED") {
        Ok(text) => text
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("HERALD_FAULT_SEED={text:?} is not a u64")),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|t| t.as_nanos() as u64)
            .unwrap_or(1),
    }
}
