//! Topic configuration: the per-topic knobs of API.md, with their defaults and validation.
//!
//! These are pure values; the metadata raft group stores them and every node sees the same ones.

use serde::{Deserialize, Serialize};

use super::batch::Compression;

/// Seven days, Kafka's default retention.
pub const DEFAULT_RETENTION_MS: i64 = 7 * 24 * 60 * 60 * 1000;
/// One MiB, the default largest message (key + value + headers) a topic accepts.
pub const DEFAULT_MAX_MESSAGE_BYTES: u32 = 1024 * 1024;
/// The most partitions one topic may have.
pub const MAX_PARTITIONS: u32 = 1024;
/// One day, Kafka's default `delete.retention.ms`: how long a tombstone stays on a compacted
/// topic after the cleaner first passed it.
pub const DEFAULT_DELETE_RETENTION_MS: i64 = 24 * 60 * 60 * 1000;
/// One day: how long a partition remembers idempotency keys and idempotent producers.
pub const DEFAULT_IDEMPOTENCY_WINDOW_MS: i64 = 24 * 60 * 60 * 1000;
/// The shortest dedup window a topic may have: a retry needs some time to arrive.
pub const MIN_IDEMPOTENCY_WINDOW_MS: i64 = 1000;
/// How many idempotency keys (and, apart, producers) a partition remembers by default.
pub const DEFAULT_IDEMPOTENCY_WINDOW_ENTRIES: u32 = 10_000;
/// The most idempotency keys (and producers) a partition may remember: the window is part of
/// the partition's raft snapshot, which travels as one message.
pub const MAX_IDEMPOTENCY_WINDOW_ENTRIES: u32 = 1_000_000;

/// What happens to old data of a topic.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum CleanupPolicy {
    #[default]
    #[serde(rename = "delete")]
    Delete,
    #[serde(rename = "compact")]
    Compact,
    #[serde(rename = "compact,delete")]
    CompactDelete,
}

impl CleanupPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            CleanupPolicy::Delete => "delete",
            CleanupPolicy::Compact => "compact",
            CleanupPolicy::CompactDelete => "compact,delete",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "delete" => Some(CleanupPolicy::Delete),
            "compact" => Some(CleanupPolicy::Compact),
            "compact,delete" | "delete,compact" => Some(CleanupPolicy::CompactDelete),
            _ => None,
        }
    }
}

/// The effective configuration of a topic: every field has a value.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicConfig {
    /// How long data is kept, in ms; -1 keeps it forever.
    pub retention_ms: i64,
    /// How many bytes one partition keeps; -1 is unlimited.
    pub retention_bytes: i64,
    pub cleanup_policy: CleanupPolicy,
    /// The largest message (key + value + headers) accepted, in bytes.
    pub max_message_bytes: u32,
    /// How stored batches are compressed.
    pub compression: Compression,
    /// How long a tombstone (a message with a null value) stays on a compacted topic after
    /// the cleaner first passed it, in ms, so that consumers catching up still see the delete.
    pub delete_retention_ms: i64,
    /// Messages younger than this (in ms) are never compacted; 0 lets the cleaner take any
    /// message it may.
    pub min_compaction_lag_ms: i64,
    /// How long each partition remembers an idempotency key or an idempotent producer, in ms
    /// (measured by the partition leaders' clocks).
    pub idempotency_window_ms: i64,
    /// How many idempotency keys, and apart how many producers, each partition remembers at
    /// most; the oldest go first.
    pub idempotency_window_entries: u32,
}

impl Default for TopicConfig {
    fn default() -> Self {
        TopicConfig {
            retention_ms: DEFAULT_RETENTION_MS,
            retention_bytes: -1,
            cleanup_policy: CleanupPolicy::Delete,
            max_message_bytes: DEFAULT_MAX_MESSAGE_BYTES,
            compression: Compression::None,
            delete_retention_ms: DEFAULT_DELETE_RETENTION_MS,
            min_compaction_lag_ms: 0,
            idempotency_window_ms: DEFAULT_IDEMPOTENCY_WINDOW_MS,
            idempotency_window_entries: DEFAULT_IDEMPOTENCY_WINDOW_ENTRIES,
        }
    }
}

/// A partial configuration, as a client sends it on create or update: absent fields keep
/// their current (or default) value.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopicConfigPatch {
    pub retention_ms: Option<i64>,
    pub retention_bytes: Option<i64>,
    pub cleanup_policy: Option<CleanupPolicy>,
    pub max_message_bytes: Option<u32>,
    pub compression: Option<Compression>,
    pub delete_retention_ms: Option<i64>,
    pub min_compaction_lag_ms: Option<i64>,
    pub idempotency_window_ms: Option<i64>,
    pub idempotency_window_entries: Option<u32>,
}

impl TopicConfig {
    /// Applies a patch, refusing values that make no sense. Returns the new configuration.
    pub fn patched(&self, patch: &TopicConfigPatch) -> Result<TopicConfig, String> {
        let mut next = self.clone();
        if let Some(value) = patch.retention_ms {
            if value < -1 || value == 0 {
                return Err(
                    "config.retention_ms must be -1 (forever) or a positive number of ms".into(),
                );
            }
            next.retention_ms = value;
        }
        if let Some(value) = patch.retention_bytes {
            if value < -1 || value == 0 {
                return Err(
                    "config.retention_bytes must be -1 (unlimited) or a positive number of bytes"
                        .into(),
                );
            }
            next.retention_bytes = value;
        }
        if let Some(value) = patch.cleanup_policy {
            next.cleanup_policy = value;
        }
        if let Some(value) = patch.max_message_bytes {
            if value == 0 || value > 64 * 1024 * 1024 {
                return Err("config.max_message_bytes must be between 1 and 67108864".into());
            }
            next.max_message_bytes = value;
        }
        if let Some(value) = patch.compression {
            next.compression = value;
        }
        if let Some(value) = patch.delete_retention_ms {
            if value < 0 {
                return Err(format!(
                    "config.delete_retention_ms must be 0 or a positive number of ms, got {value}"
                ));
            }
            next.delete_retention_ms = value;
        }
        if let Some(value) = patch.min_compaction_lag_ms {
            if value < 0 {
                return Err(format!(
                    "config.min_compaction_lag_ms must be 0 or a positive number of ms, got {value}"
                ));
            }
            next.min_compaction_lag_ms = value;
        }
        if let Some(value) = patch.idempotency_window_ms {
            if value < MIN_IDEMPOTENCY_WINDOW_MS {
                return Err(format!(
                    "config.idempotency_window_ms must be at least {MIN_IDEMPOTENCY_WINDOW_MS} ms, got {value}"
                ));
            }
            next.idempotency_window_ms = value;
        }
        if let Some(value) = patch.idempotency_window_entries {
            if value == 0 || value > MAX_IDEMPOTENCY_WINDOW_ENTRIES {
                return Err(format!(
                    "config.idempotency_window_entries must be between 1 and {MAX_IDEMPOTENCY_WINDOW_ENTRIES}, got {value}"
                ));
            }
            next.idempotency_window_entries = value;
        }
        Ok(next)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compaction_defaults() {
        let config = TopicConfig::default();
        assert_eq!(config.delete_retention_ms, 86_400_000);
        assert_eq!(config.min_compaction_lag_ms, 0);
    }

    #[test]
    fn compaction_settings_are_patched_and_kept() {
        let config = TopicConfig::default()
            .patched(&TopicConfigPatch {
                delete_retention_ms: Some(0),
                min_compaction_lag_ms: Some(60_000),
                ..TopicConfigPatch::default()
            })
            .expect("valid");
        assert_eq!(config.delete_retention_ms, 0);
        assert_eq!(config.min_compaction_lag_ms, 60_000);
        // An unrelated patch keeps them.
        let config = config
            .patched(&TopicConfigPatch {
                retention_ms: Some(1000),
                ..TopicConfigPatch::default()
            })
            .expect("valid");
        assert_eq!(config.delete_retention_ms, 0);
        assert_eq!(config.min_compaction_lag_ms, 60_000);
        assert_eq!(config.retention_ms, 1000);
    }

    #[test]
    fn idempotency_window_defaults_and_bounds() {
        let config = TopicConfig::default();
        assert_eq!(config.idempotency_window_ms, 86_400_000);
        assert_eq!(config.idempotency_window_entries, 10_000);
        let patched = config
            .patched(&TopicConfigPatch {
                idempotency_window_ms: Some(1000),
                idempotency_window_entries: Some(1_000_000),
                ..TopicConfigPatch::default()
            })
            .expect("valid");
        assert_eq!(patched.idempotency_window_ms, 1000);
        assert_eq!(patched.idempotency_window_entries, 1_000_000);
        for patch in [
            TopicConfigPatch {
                idempotency_window_ms: Some(999),
                ..TopicConfigPatch::default()
            },
            TopicConfigPatch {
                idempotency_window_entries: Some(0),
                ..TopicConfigPatch::default()
            },
            TopicConfigPatch {
                idempotency_window_entries: Some(1_000_001),
                ..TopicConfigPatch::default()
            },
        ] {
            let error = config.patched(&patch).unwrap_err();
            assert!(error.contains("config.idempotency_window_"), "{error}");
        }
    }

    #[test]
    fn negative_compaction_settings_are_refused() {
        let config = TopicConfig::default();
        let error = config
            .patched(&TopicConfigPatch {
                delete_retention_ms: Some(-1),
                ..TopicConfigPatch::default()
            })
            .unwrap_err();
        assert!(error.contains("config.delete_retention_ms"), "{error}");
        let error = config
            .patched(&TopicConfigPatch {
                min_compaction_lag_ms: Some(-5),
                ..TopicConfigPatch::default()
            })
            .unwrap_err();
        assert!(error.contains("config.min_compaction_lag_ms"), "{error}");
    }
}
