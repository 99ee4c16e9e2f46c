//! The composition root: open storage, start raft and the cluster, build the broker, serve
//! the API, and shut all of it down in order.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use crate::api::{self, ApiConfig};
use crate::broker::{Broker, BrokerOptions};
use crate::cluster::{Cluster, ClusterOptions};
use crate::config::Config;
use crate::raft::RaftTiming;
use crate::rpc::RpcLimits;
use crate::storage::{Cf, Store, StoreOptions, WriteSet};

const NODE_ID_KEY: &[u8] = b"node_id";

/// Runs a node until Ctrl-C or SIGTERM.
pub async fn serve(config: Config) -> anyhow::Result<()> {
    config.validate()?;
    let metrics = crate::telemetry::init_metrics()?;
    let store = open_store(&config).await?;
    let cluster = Cluster::start(ClusterOptions {
        node_id: config.node_id,
        http_addr: config.http_addr.to_string(),
        raft_addr: config.raft_addr.clone(),
        store: store.clone(),
        timing: RaftTiming {
            heartbeat_interval_ms: config.raft.heartbeat_interval_ms,
            election_timeout_min_ms: config.raft.election_timeout_min_ms,
            election_timeout_max_ms: config.raft.election_timeout_max_ms,
        },
        founders: config.founding_members()?,
        join: config.join,
        metadata_voters: config.metadata_voters,
        rpc_limits: RpcLimits::default(),
        leader_wait: Duration::from_millis(config.leader_wait_ms),
    })
    .await
    .context("starting the cluster")?;
    let broker = Broker::new(
        cluster.clone(),
        BrokerOptions {
            fetch_max_bytes: config.fetch_max_bytes,
            leader_wait: Duration::from_millis(config.leader_wait_ms),
            produce_timeout: Duration::from_millis(config.produce_timeout_ms),
            max_unacknowledged_produces: config.max_unacknowledged_produces,
        },
    );
    cluster.set_broker_service(broker.forwarding_service());
    let router = api::router(
        broker,
        ApiConfig {
            max_body_bytes: config.max_body_bytes,
            metrics,
        },
    );
    let listener = tokio::net::TcpListener::bind(config.http_addr)
        .await
        .with_context(|| format!("binding the HTTP API to {}", config.http_addr))?;
    tracing::info!(
        node_id = config.node_id,
        http = %listener.local_addr()?,
        raft = %config.raft_addr,
        data_dir = %config.data_dir.display(),
        "herald is serving"
    );
    let (stop_sender, stop_receiver) = tokio::sync::watch::channel(false);
    let server = axum::serve(listener, router).with_graceful_shutdown(async move {
        let mut stop = stop_receiver;
        let _ = stop.wait_for(|stopped| *stopped).await;
    });
    let server_task = tokio::spawn(async move { server.await });
    shutdown_signal().await;
    tracing::info!("shutting down: finishing in-flight requests");
    let _ = stop_sender.send(true);
    match tokio::time::timeout(Duration::from_millis(config.shutdown_grace_ms), server_task).await {
        Ok(Ok(Ok(()))) => {}
        Ok(Ok(Err(error))) => tracing::warn!(%error, "HTTP server stopped with an error"),
        Ok(Err(error)) => tracing::warn!(%error, "HTTP server task failed"),
        Err(_) => tracing::warn!("in-flight requests did not finish within the grace period"),
    }
    stop_cluster(cluster, store).await;
    Ok(())
}

async fn stop_cluster(cluster: Arc<Cluster>, store: Store) {
    cluster.shutdown().await;
    match tokio::task::spawn_blocking(move || store.flush()).await {
        Ok(Ok(())) => tracing::info!("storage flushed; bye"),
        Ok(Err(error)) => tracing::error!(%error, "flushing storage failed"),
        Err(error) => tracing::error!(%error, "flushing storage failed"),
    }
}

/// Opens the data directory, checking it belongs to this node id.
async fn open_store(config: &Config) -> anyhow::Result<Store> {
    let mut options = StoreOptions::new(&config.data_dir);
    options.block_cache_bytes = config.storage.block_cache_bytes;
    options.log_write_buffer_bytes = config.storage.log_write_buffer_bytes;
    let node_id = config.node_id;
    let data_dir = config.data_dir.clone();
    tokio::task::spawn_blocking(move || -> anyhow::Result<Store> {
        let store = Store::open(&options)
            .with_context(|| format!("opening storage in {}", data_dir.display()))?;
        match store.get(Cf::Node, NODE_ID_KEY)? {
            Some(bytes) => {
                let stored =
                    u64::from_be_bytes(bytes.as_slice().try_into().context("corrupt node id")?);
                anyhow::ensure!(
                    stored == node_id,
                    "data directory {} belongs to node {stored}, not node {node_id}",
                    data_dir.display()
                );
            }
            None => {
                let mut writes = WriteSet::new();
                writes.put(
                    Cf::Node,
                    NODE_ID_KEY.to_vec(),
                    node_id.to_be_bytes().to_vec(),
                );
                store.write(writes, true)?;
            }
        }
        Ok(store)
    })
    .await?
}

async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(error) = tokio::signal::ctrl_c().await {
            tracing::error!(%error, "cannot listen for Ctrl-C");
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(error) => {
                tracing::error!(%error, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = terminate => {},
    }
}
