//! Reading a node's own metrics: per-replica gauges (what this node holds, not what the leader
//! says) and node-wide counters, from `GET /metrics`.

use std::time::Duration;

use super::{poll, Server};

impl Server {
    /// The value of metric `name` on this node whose labels include every `labels` pair;
    /// `None` when the node does not (yet) publish it.
    pub async fn metric(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        let text = self.get("/metrics").await.text().await.unwrap_or_default();
        let wanted: Vec<String> = labels
            .iter()
            .map(|(label, value)| format!("{label}=\"{value}\""))
            .collect();
        text.lines()
            .filter(|line| !line.starts_with('#'))
            .find(|line| {
                let series = line.split(' ').next().unwrap_or_default();
                let metric = series.split('{').next().unwrap_or_default();
                metric == name && wanted.iter().all(|pair| series.contains(pair.as_str()))
            })
            .and_then(|line| line.rsplit(' ').next())
            .and_then(|value| value.parse::<f64>().ok())
    }

    /// The sum of every series of metric `name` on this node (a counter over all its labels);
    /// 0 when the node does not publish it.
    pub async fn metric_total(&self, name: &str) -> f64 {
        let text = self.get("/metrics").await.text().await.unwrap_or_default();
        text.lines()
            .filter(|line| !line.starts_with('#'))
            .filter(|line| {
                let series = line.split(' ').next().unwrap_or_default();
                series.split('{').next() == Some(name)
            })
            .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
            .sum()
    }

    /// A per-partition gauge of `topic`/`partition` on this node.
    pub async fn partition_gauge(&self, name: &str, topic: &str, partition: u32) -> Option<u64> {
        let partition = partition.to_string();
        self.metric(name, &[("topic", topic), ("partition", &partition)])
            .await
            .map(|value| value as u64)
    }

    /// Waits (at most `within`) until this node's replica of `topic`/`partition` has a
    /// checkpoint of its state at or past `offset` (`herald_replica_checkpointed_offset`):
    /// from then on it can snapshot, and purge its raft log, past every message before
    /// `offset`. Answers the checkpoint's offset, or what was last seen.
    pub async fn wait_for_checkpoint(
        &self,
        topic: &str,
        partition: u32,
        offset: u64,
        within: Duration,
    ) -> Result<u64, String> {
        poll(within, Duration::from_millis(100), || async {
            match self
                .partition_gauge("herald_replica_checkpointed_offset", topic, partition)
                .await
            {
                Some(checkpointed) if checkpointed >= offset => Ok(checkpointed),
                seen => Err(format!(
                    "checkpointed offset {seen:?}, waiting for {offset}"
                )),
            }
        })
        .await
    }
}
