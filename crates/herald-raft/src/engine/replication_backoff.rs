//! How long a leader's replication to an unreachable follower waits before it tries again.
//!
//! openraft's default is a constant 200 ms. One group retrying a dead node five times a
//! second is nothing; the 1,700 groups a survivor takes over when a node of a 10,000-partition
//! cluster dies are 8,500 failed replication sessions a second (each a request stream built, a
//! log read, an error reported to the group's core), which overloaded the survivors until
//! their heartbeats to each other came late and their groups could not go quiet
//! (`benches/cluster-idle.sh` with `RESTART=1`). So the wait doubles from
//! [`FIRST_WAIT`] to [`LONGEST_WAIT`], with a spread per (group, follower) so that the groups
//! of one dead node do not retry in step.
//!
//! A follower's return is not left to the longest wait: the cluster layer resets the backoff
//! of every group this node leads when its connection to the peer comes back
//! ([`crate::PartitionReplica::reset_replication_backoff`]), and openraft drops the backoff
//! at the first answer.

use std::time::Duration;

use herald_domain::RaftGroupId;
use openraft::network::Backoff;

/// The first wait after a follower is found unreachable (openraft's own default).
pub(crate) const FIRST_WAIT: Duration = Duration::from_millis(200);
/// The longest wait: a follower whose return the cluster layer missed is retried this often.
pub(crate) const LONGEST_WAIT: Duration = Duration::from_secs(5);

/// The waits before each retry to `follower` in `group`: doubling, capped, each within ±20%
/// of its nominal value (a spread fixed per group, follower and attempt).
pub(crate) fn replication_backoff(group: RaftGroupId, follower: u64) -> Backoff {
    let seed = group.get().wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ follower;
    Backoff::new(waits(seed))
}

fn waits(seed: u64) -> impl Iterator<Item = Duration> + Send + 'static {
    (0u32..).map(move |attempt| {
        let nominal = FIRST_WAIT
            .saturating_mul(1u32 << attempt.min(16))
            .min(LONGEST_WAIT);
        // 80% to 120% of the nominal wait, in steps of 1%.
        let percent = 80 + (mix(seed ^ u64::from(attempt)) % 41) as u32;
        nominal * percent / 100
    })
}

/// splitmix64's finaliser: a well-spread number from a seed, with no state to share.
fn mix(seed: u64) -> u64 {
    let mut value = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    value = (value ^ (value >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    value = (value ^ (value >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    value ^ (value >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_double_from_the_first_to_the_longest_within_a_fifth() {
        let waits: Vec<Duration> = waits(7).take(40).collect();
        for (attempt, wait) in waits.iter().enumerate() {
            let nominal = FIRST_WAIT
                .saturating_mul(1 << attempt.min(16))
                .min(LONGEST_WAIT);
            assert!(
                *wait >= nominal * 4 / 5 && *wait <= nominal * 6 / 5,
                "attempt {attempt}: {wait:?} is not within a fifth of {nominal:?}"
            );
        }
        // Five doublings reach the longest wait; it never grows past it.
        assert!(waits[5] >= LONGEST_WAIT * 4 / 5);
        assert!(waits.iter().all(|wait| *wait <= LONGEST_WAIT * 6 / 5));
    }

    #[test]
    fn groups_of_one_dead_follower_do_not_retry_in_step() {
        let fifth_waits: std::collections::HashSet<Duration> = (1..=100u64)
            .map(|group| {
                let seed = group.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 1;
                waits(seed).nth(5).unwrap_or_default()
            })
            .collect();
        assert!(
            fifth_waits.len() > 20,
            "100 groups share only {} distinct waits",
            fifth_waits.len()
        );
    }
}
