//! The composition root: open storage, start raft and the cluster, build the broker, serve
//! the API, and shut all of it down in order.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;

use crate::api::{self, ApiConfig};
use crate::broker::{Broker, BrokerOptions, GroupOptions};
use crate::cluster::{CleanerOptions, Cluster, ClusterOptions};
use crate::cluster_secret::{ClusterSecret, KeyPurpose, SecretLookup};
use crate::config::Config;
use crate::domain::wire_version::{WireVersion, WIRE_VERSION};
use crate::raft::RaftTiming;
use crate::rpc::{LaneLimits, RpcLimits};
use crate::storage::{Store, StoreOptions};

/// What the built-in issuer's tokens say: the configured issuer, or this node's own URL.
fn token_settings(config: &Config) -> crate::broker::auth::tokens::TokenSettings {
    let scheme = if config.tls.enabled() {
        "https"
    } else {
        "http"
    };
    crate::broker::auth::tokens::TokenSettings {
        issuer: config
            .auth
            .issuer
            .clone()
            .unwrap_or_else(|| format!("{scheme}://{}", config.http_addr)),
        audience: config.auth.audience.clone(),
        lifetime: Duration::from_millis(config.auth.token_lifetime_ms),
        max_session: Duration::from_millis(config.auth.max_session_ms),
        leeway: Duration::from_millis(config.auth.clock_leeway_ms),
        builtin_enabled: config.auth.builtin_issuer_enabled,
    }
}

/// The external OIDC issuers `[[auth.external_issuers]]` trusts (their keys not fetched yet).
fn external_issuers(
    config: &Config,
) -> anyhow::Result<crate::broker::auth::external::ExternalIssuers> {
    use crate::broker::auth::external::{ExternalIssuerSettings, ExternalIssuers};
    let mut settings = Vec::new();
    for external in &config.auth.external_issuers {
        let algorithms = external
            .algorithms
            .iter()
            .map(|name| {
                name.parse()
                    .with_context(|| format!("auth.external_issuers: algorithm '{name}'"))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        settings.push(ExternalIssuerSettings {
            issuer: external.issuer.clone(),
            audience: external.audience.clone(),
            jwks_url: external.jwks_url.clone(),
            roles_claim: external.roles_claim.clone(),
            subject_claim: external.subject_claim.clone(),
            subject_prefix: external.effective_subject_prefix(),
            algorithms,
            ca_file: external.ca_file.clone(),
            allow_http: external.allow_http,
            refresh_interval: Duration::from_millis(external.jwks_refresh_interval_ms),
            min_refetch_interval: Duration::from_millis(external.jwks_min_refetch_interval_ms),
            fetch_timeout: Duration::from_millis(external.fetch_timeout_ms),
            leeway: Duration::from_millis(config.auth.clock_leeway_ms),
        });
    }
    ExternalIssuers::new(settings).context("setting up the external OIDC issuers")
}

/// The client listener's TLS, when `[tls]` configures it.
fn client_tls(config: &Config) -> anyhow::Result<Option<api::server::tls::TlsAcceptor>> {
    let (Some(cert_file), Some(key_file)) = (&config.tls.cert_file, &config.tls.key_file) else {
        return Ok(None);
    };
    let settings = api::server::tls::TlsSettings {
        cert_file: cert_file.clone(),
        key_file: key_file.clone(),
        allow_plaintext: config.tls.allow_plaintext,
        handshake_timeout: Duration::from_millis(config.tls.handshake_timeout_ms),
        reload_check_interval: Duration::from_millis(config.tls.reload_check_interval_ms),
    };
    Ok(Some(api::server::tls::TlsAcceptor::load(settings)?))
}

/// Mutual TLS between nodes, when `[tls]` configures it; reloaded on SIGHUP and file changes.
fn peer_tls(config: &Config) -> anyhow::Result<Option<crate::rpc::PeerTls>> {
    let tls = &config.tls;
    let (Some(cert_file), Some(key_file), Some(ca_file)) =
        (&tls.rpc_cert_file, &tls.rpc_key_file, &tls.rpc_ca_file)
    else {
        return Ok(None);
    };
    let peer_tls = crate::rpc::PeerTls::load(crate::rpc::PeerTlsFiles {
        cert_file: cert_file.clone(),
        key_file: key_file.clone(),
        ca_file: ca_file.clone(),
        reload_check_interval: Duration::from_millis(tls.reload_check_interval_ms),
    })?;
    peer_tls.spawn_reloader().context("watching for SIGHUP")?;
    Ok(Some(peer_tls))
}

/// The cluster secret (`cluster_secret`): from the environment, the configured file or the data
/// directory, generated there for a node that founds a cluster alone.
fn cluster_secret(config: &Config) -> anyhow::Result<ClusterSecret> {
    let secret = ClusterSecret::load(&SecretLookup {
        from_environment: std::env::var(crate::cluster_secret::SECRET_ENV).ok(),
        configured_file: config.cluster_secret_file.as_deref(),
        data_dir: &config.data_dir,
        may_generate: config.founds_alone(),
    })?;
    tracing::info!(
        source = %secret.source(),
        fingerprint = %secret.fingerprint(),
        "cluster secret loaded (every node of the cluster must log the same fingerprint)"
    );
    Ok(secret)
}

/// The authentication service: one per node, shared by the API and the bootstrap.
fn auth_service(
    config: &Config,
    broker: &Broker,
    secret: &ClusterSecret,
    external: crate::broker::auth::external::ExternalIssuers,
) -> anyhow::Result<crate::broker::auth::service::Auth> {
    use crate::broker::auth::failed_requests::FailureBudgets;
    use crate::broker::auth::secret_checks::SecretChecks;
    let secret_checks = SecretChecks::start(
        config.auth.effective_secret_checks(),
        config.auth.secret_check_queue,
    )
    .context("starting the secret check threads")?;
    Ok(broker
        .auth(crate::broker::auth::service::AuthSetup {
            settings: Arc::new(token_settings(config)),
            sealing: Arc::new(crate::broker::auth::sealing::SealingKey::of(secret)),
            secret_checks,
            failure_budgets: FailureBudgets {
                per_client_per_min: config.auth.failed_token_requests_per_client_per_min,
                per_address_per_min: config.auth.failed_token_requests_per_address_per_min,
            },
        })
        .with_external_issuers(external))
}

/// For tests only, never for a node in service: the environment variable that makes this node
/// report an older wire version than its release's, so a test can run a cluster whose version
/// stays behind as during a rolling upgrade (`tests/it/cluster/cluster_mixed_versions.rs`).
/// Deliberately not a configuration setting or a flag.
pub const TEST_MAX_WIRE_VERSION_ENV: &str = "HERALD_TEST_MAX_WIRE_VERSION";

/// The wire version this node reports: its release's, or a lower one set by
/// [`TEST_MAX_WIRE_VERSION_ENV`].
fn wire_version() -> anyhow::Result<WireVersion> {
    let Ok(value) = std::env::var(TEST_MAX_WIRE_VERSION_ENV) else {
        return Ok(WIRE_VERSION);
    };
    let claimed: u16 = value.trim().parse().with_context(|| {
        format!("{TEST_MAX_WIRE_VERSION_ENV} must be a wire version number, got '{value}'")
    })?;
    anyhow::ensure!(
        claimed <= WIRE_VERSION.get(),
        "{TEST_MAX_WIRE_VERSION_ENV}={claimed} is newer than this release's wire version {WIRE_VERSION}"
    );
    tracing::warn!(
        claimed,
        "{TEST_MAX_WIRE_VERSION_ENV} is set: this node reports an older wire version than its release's (for tests only)"
    );
    Ok(WireVersion(claimed))
}

/// Runs a node until Ctrl-C or SIGTERM.
pub async fn serve(config: Config) -> anyhow::Result<()> {
    config.validate()?;
    // Whatever the node creates is its owner's alone (main does it first; a node started
    // another way gets it here).
    crate::storage::private_files::restrict_new_files();
    // Before anything starts: a certificate that cannot be used stops the node here.
    let tls = client_tls(&config)?;
    let peer_tls = peer_tls(&config)?;
    let external_issuers = external_issuers(&config)?;
    let metrics = crate::telemetry::init_metrics()?;
    let store = open_store(&config).await?;
    let secret = cluster_secret(&config)?;
    // Without mutual TLS, nodes prove the cluster secret in every RPC hello.
    let hello_key = peer_tls
        .is_none()
        .then(|| crate::rpc::HelloKey::new(&secret.derive(KeyPurpose::RpcHello)));
    let wire_version = wire_version()?;
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
        catch_up_bytes_per_sec: config.raft.catch_up_bytes_per_sec,
        quiesce_after: Duration::from_millis(config.raft.quiesce_after_ms),
        zone: config.zone.clone(),
        rebalance: herald_cluster::RebalanceOptions {
            auto: config.rebalance.auto,
            settle: Duration::from_millis(config.rebalance.settle_ms),
            max_moves: config.rebalance.max_moves,
        },
        join: config.join,
        metadata_voters: config.metadata_voters,
        rpc_limits: RpcLimits {
            source_ip: config.raft_source_ip(),
            client: LaneLimits {
                max_in_flight_bytes_per_peer: config.rpc.forward_max_in_flight_bytes,
                max_concurrent_requests_per_connection: config.rpc.forward_max_concurrent_requests,
            },
            tls: peer_tls,
            hello_key,
            ..RpcLimits::default()
        },
        leader_wait: Duration::from_millis(config.leader_wait_ms),
        retention_check_interval: Duration::from_millis(config.retention_check_interval_ms.max(1)),
        cleaner: CleanerOptions {
            io_max_bytes_per_sec: config.cleaner_io_max_bytes_per_sec,
            dedupe_buffer_bytes: usize::try_from(config.cleaner_dedupe_buffer_bytes)
                .unwrap_or(usize::MAX),
            min_dirty_ratio: config.cleaner_min_dirty_ratio,
        },
        wire_version,
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
            max_queued_bytes_per_partition: config.max_queued_bytes_per_partition,
            max_in_flight_produce_bytes: config.storage.produce_in_flight_bytes(),
            max_in_flight_appends_per_partition: config.max_in_flight_appends_per_partition,
            default_replication_factor: config.default_replication_factor,
            groups: GroupOptions {
                min_session_timeout: Duration::from_millis(config.groups.min_session_timeout_ms),
                max_session_timeout: Duration::from_millis(config.groups.max_session_timeout_ms),
                default_session_timeout: Duration::from_millis(
                    config.groups.default_session_timeout_ms,
                ),
                max_members: config.groups.max_members,
                max_cursor_bytes: config.groups.max_cursor_bytes,
                max_metric_groups: config.groups.max_metric_groups,
            },
            requests: crate::broker::requests::RequestOptions {
                max_waiting: config.max_waiting_requests,
            },
            backups: crate::broker::backups::BackupOptions {
                backup_dir: Some(backup_dir(&config)),
                node_files: vec![config
                    .data_dir
                    .join(crate::cluster_secret::DEFAULT_FILE_NAME)],
                format_version: crate::format::FORMAT_VERSION,
            },
        },
    );
    cluster.set_broker_service(broker.forwarding_service());
    let auth = auth_service(&config, &broker, &secret, external_issuers.clone())?;
    drop(secret);
    if config.auth.bootstrap_admin && cluster.metadata().founded_here() {
        let scheme = if config.tls.enabled() {
            "https"
        } else {
            "http"
        };
        tokio::spawn(crate::broker::auth::bootstrap::create_admin(
            auth.clone(),
            config.data_dir.clone(),
            format!("{scheme}://{}/oauth/token", config.http_addr),
            cluster.stopping(),
        ));
    }
    crate::broker::subscriptions::spawn_redrive_supervisor(broker.clone());
    let (stop_sender, stop_receiver) = tokio::sync::watch::channel(false);
    let shutdown = api::server::shutdown::Shutdown::new(stop_receiver.clone());
    let quotas = crate::broker::quota::Quotas::new(config.quotas.policy());
    let ws = crate::ws::WsState::new(broker.clone(), shutdown.clone(), config.ws.clone())
        .with_quotas(quotas.clone())
        .with_client_stall_timeout(Duration::from_millis(config.client_stall_timeout_ms));
    let auditing = api::middleware::audit_layer::Auditing {
        log: crate::broker::audit::AuditLog::start(
            broker.clone(),
            crate::broker::audit::AuditSettings {
                retention_ms: config.audit.retention_ms,
                retention_bytes: config.audit.retention_bytes,
                replication_factor: config.audit.replication_factor,
                queue_capacity: config.audit.queue_capacity,
                max_batch: config.audit.max_batch,
                refusal_window: Duration::from_millis(config.audit.refusal_window_ms),
            },
        ),
        trusted_proxies: config.audit.trusted_proxies.clone().into(),
    };
    let router = api::router(
        broker,
        ApiConfig {
            max_body_bytes: config.max_body_bytes,
            limits: api::middleware::limits::RequestLimits {
                request_timeout: Duration::from_millis(config.request_timeout_ms),
                max_concurrent_requests: config.max_concurrent_requests,
            },
            metrics,
            shutdown,
            event_streams: api::routes::events::EventStreamLimits {
                max_streams: config.max_sse_streams,
                keepalive: Duration::from_millis(config.sse_keepalive_ms),
            },
            ws: ws.clone(),
            auth,
            auditing,
            quotas,
            auth_enabled: config.auth.enabled,
            public_metrics: config.auth.public_metrics,
        },
    );
    // In the background: a provider that is down does not hold the node's start.
    external_issuers.start();
    let listener = tokio::net::TcpListener::bind(config.http_addr)
        .await
        .with_context(|| format!("binding the HTTP API to {}", config.http_addr))?;
    tracing::info!(
        node_id = config.node_id,
        http = %listener.local_addr()?,
        tls = tls.is_some(),
        raft = %config.raft_addr,
        data_dir = %config.data_dir.display(),
        "herald is serving"
    );
    if config.auth.enabled && config.auth.public_metrics {
        tracing::warn!(
            "/metrics answers without a token (auth.public_metrics = true, the default): it names \
             every topic, consumer group and subscription. Set [auth] public_metrics = false to \
             require `view` on `cluster:metrics`"
        );
    }
    if let Some(tls) = &tls {
        tls.spawn_reloader().context("watching for SIGHUP")?;
    }
    let listener =
        api::server::listener::LimitedListener::new(listener, config.max_connections, tls);
    let timeouts = api::server::connections::ConnectionTimeouts {
        header_read: Duration::from_millis(config.header_read_timeout_ms),
        idle: Duration::from_millis(config.idle_timeout_ms),
        http2_keepalive: Duration::from_millis(config.http2_keepalive_interval_ms),
        client_stall: Duration::from_millis(config.client_stall_timeout_ms),
    };
    let server_task = tokio::spawn(api::server::connections::serve(
        listener,
        router,
        timeouts,
        async move {
            let mut stop = stop_receiver;
            let _ = stop.wait_for(|stopped| *stopped).await;
        },
    ));
    shutdown_signal().await;
    hand_off_leadership(&cluster, &config).await;
    tracing::info!("shutting down: finishing in-flight requests");
    let _ = stop_sender.send(true);
    match tokio::time::timeout(Duration::from_millis(config.shutdown_grace_ms), server_task).await {
        Ok(Ok(())) => {}
        Ok(Err(error)) => tracing::warn!(%error, "HTTP server task failed"),
        Err(_) => tracing::warn!("in-flight requests did not finish within the grace period"),
    }
    // Upgraded sockets outlive the HTTP server; each got a close frame on the stop signal.
    if !ws
        .closed(Duration::from_millis(config.shutdown_grace_ms))
        .await
    {
        tracing::warn!("WebSockets did not close within the grace period");
    }
    stop_cluster(cluster, store).await;
    Ok(())
}

/// Before it stops taking requests, the node hands the leadership of every group it leads to
/// an in-sync replica, so a rolling restart moves leaders instead of losing them (its clients,
/// and those of other nodes whose requests it served as leader, keep being answered).
async fn hand_off_leadership(cluster: &Cluster, config: &Config) {
    if config.leadership_handoff_timeout_ms == 0 {
        return;
    }
    let started = std::time::Instant::now();
    let report = cluster
        .hand_off_leadership(Duration::from_millis(config.leadership_handoff_timeout_ms))
        .await;
    if report.moved.is_empty() && report.kept.is_empty() {
        return;
    }
    for (group, reason) in &report.kept {
        tracing::warn!(group = group.get(), %reason, "leadership not handed off before stopping");
    }
    tracing::info!(
        moved = report.moved.len(),
        kept = report.kept.len(),
        took_ms = started.elapsed().as_millis() as u64,
        "handed off leadership before stopping"
    );
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
    options.memtable_bytes = config.storage.memtable_bytes;
    options.bytes_per_sync = config.storage.bytes_per_sync;
    options.direct_io_for_flush = config.storage.direct_io_for_flush;
    options.disk_reserve_bytes = config.storage.disk_reserve_bytes;
    let node_id = config.node_id;
    let data_dir = config.data_dir.clone();
    tokio::task::spawn_blocking(move || -> anyhow::Result<Store> {
        let store = Store::open(&options)
            .with_context(|| format!("opening storage in {}", data_dir.display()))?;
        crate::format::open_data_dir(&store, node_id, &data_dir)?;
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

/// `storage.backup_dir`, or the data directory's path followed by `.backups` (beside it, so on
/// the same file system as a rule: a backup is then hard links).
fn backup_dir(config: &Config) -> std::path::PathBuf {
    match &config.storage.backup_dir {
        Some(dir) => dir.clone(),
        None => {
            let mut dir = config.data_dir.clone().into_os_string();
            dir.push(".backups");
            dir.into()
        }
    }
}
