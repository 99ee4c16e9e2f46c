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
