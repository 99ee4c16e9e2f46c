//! The background task that writes queued audit events to `__audit`.

use std::time::Duration;

use tokio::sync::mpsc;

use super::{AuditEvent, AuditSettings, AUDIT_DROPPED_TOTAL, AUDIT_TOPIC, AUDIT_WRITTEN_TOTAL};
use crate::{
    Acks, Broker, BrokerError, BrokerResult, CreateTopic, Idempotence, ProduceMessage,
    SubjectsPatch, UpdateTopic,
};
use herald_domain::{RecordKey, RecordValue, TopicConfigPatch};

/// How many times a batch is tried before its events are dropped.
const WRITE_ATTEMPTS: u32 = 5;
/// The wait after the first failed attempt; it doubles after each.
const FIRST_RETRY_WAIT: Duration = Duration::from_millis(200);

/// Writes batches of events until every sender is gone.
pub(super) async fn run(
    broker: Broker,
    settings: AuditSettings,
    mut events: mpsc::Receiver<AuditEvent>,
) {
    let max_batch = settings.max_batch.max(1);
    let mut batch = Vec::with_capacity(max_batch.min(1024));
    let mut topic_ready = false;
    while events.recv_many(&mut batch, max_batch).await > 0 {
        let messages: Vec<ProduceMessage> = batch.drain(..).filter_map(message_of).collect();
        if messages.is_empty() {
            continue;
        }
        write(&broker, &settings, &mut topic_ready, messages).await;
    }
}

/// The stored form of an event: keyed by its principal, timestamped with its time, so a
/// timestamp seek finds events by time.
fn message_of(event: AuditEvent) -> Option<ProduceMessage> {
    match serde_json::to_vec(&event) {
        Ok(json) => Some(ProduceMessage {
            key: Some(RecordKey::Text(event.principal.clone())),
            value: RecordValue::Json(json.into()),
            headers: Vec::new(),
            partition: Some(0),
            timestamp: Some(event.at_ms),
        }),
        Err(error) => {
            tracing::warn!(%error, "an audit event could not be encoded");
            metrics::counter!(AUDIT_DROPPED_TOTAL, "reason" => "write_failed").increment(1);
            None
        }
    }
}

/// Writes one batch, retrying with backoff; events that cannot be written are dropped
/// (counted and logged) so the queue moves on. A retry after an unknown outcome may write a
/// batch twice: the log is at least once.
async fn write(
    broker: &Broker,
    settings: &AuditSettings,
    topic_ready: &mut bool,
    messages: Vec<ProduceMessage>,
) {
    let count = messages.len() as u64;
    let mut wait = FIRST_RETRY_WAIT;
    let mut last_error = None;
    for attempt in 1..=WRITE_ATTEMPTS {
        let written = async {
            if !*topic_ready {
                ensure_topic(broker, settings).await?;
                *topic_ready = true;
            }
            broker
                .produce()
                .produce(
                    AUDIT_TOPIC,
                    messages.clone(),
                    Acks::All,
                    Idempotence::default(),
                )
                .await
        }
        .await;
        match written {
            Ok(answer) if answer.failed.is_empty() => {
                metrics::counter!(AUDIT_WRITTEN_TOTAL).increment(count);
                return;
            }
            Ok(answer) => last_error = answer.failed.into_iter().next().map(|share| share.error),
            Err(error) => {
                // Deleted behind the writer's back (it cannot be through the API): make it again.
                if matches!(error, BrokerError::TopicNotFound(_)) {
                    *topic_ready = false;
                }
                last_error = Some(error);
            }
        }
        if attempt < WRITE_ATTEMPTS {
            tokio::time::sleep(wait).await;
            wait *= 2;
        }
    }
    let error = last_error
        .map(|error| error.to_string())
        .unwrap_or_default();
    tracing::warn!(events = count, %error, "audit events could not be written: dropped");
    metrics::counter!(AUDIT_DROPPED_TOTAL, "reason" => "write_failed").increment(count);
}

/// The topic's retention as configured.
fn retention(settings: &AuditSettings) -> TopicConfigPatch {
    TopicConfigPatch {
        retention_ms: Some(settings.retention_ms),
        retention_bytes: Some(settings.retention_bytes),
        ..TopicConfigPatch::default()
    }
}

/// Creates `__audit` if it does not exist, or brings its retention to the configured one.
async fn ensure_topic(broker: &Broker, settings: &AuditSettings) -> BrokerResult<()> {
    if let Ok(topic) = broker.core().topic(AUDIT_TOPIC) {
        let current = (topic.config.retention_ms, topic.config.retention_bytes);
        drop(topic);
        if current != (settings.retention_ms, settings.retention_bytes) {
            let update = UpdateTopic {
                partitions: None,
                config: retention(settings),
                subjects: SubjectsPatch::default(),
            };
            broker.topics().update_topic(AUDIT_TOPIC, update).await?;
        }
        return Ok(());
    }
    let nodes = broker.topics().placement_nodes().len().max(1);
    let replication_factor = settings
        .replication_factor
        .min(u16::try_from(nodes).unwrap_or(u16::MAX));
    let request = CreateTopic {
        name: AUDIT_TOPIC.to_string(),
        partitions: 1,
        replication_factor: Some(replication_factor),
        config: retention(settings),
        subjects: SubjectsPatch::default(),
    };
    match broker.topics().create_any_topic(request).await {
        // Another node made it first, perhaps with another replication factor: it is there.
        Ok(_) | Err(BrokerError::TopicExists(_)) => Ok(()),
        Err(error) => Err(error),
    }
}
