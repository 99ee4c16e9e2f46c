//! Export of spans to an OpenTelemetry collector over OTLP/HTTP (protobuf bodies), when
//! `[telemetry] otlp_endpoint` is set.
//!
//! Herald's spans are ordinary `tracing` spans (a request's, a raft proposal's); a
//! `tracing-opentelemetry` layer turns the ones Herald's own code makes at `info` into
//! OpenTelemetry spans, and the SDK's batch processor exports them from its own thread with a
//! blocking HTTP client, so exporting never runs on, or waits for, the tokio workers. A
//! collector that is down or slow costs dropped spans (the processor's queue is bounded), never
//! a stalled request.
//!
//! Only this module and [`super::logs`] name OpenTelemetry types: the rest of Herald parents a
//! request's span on its client's trace with [`set_remote_parent`].

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::Context as _;
use opentelemetry::trace::{
    SpanContext, SpanId, TraceContextExt, TraceFlags, TraceId, TraceState, TracerProvider as _,
};
use opentelemetry::KeyValue;
use opentelemetry_otlp::{Protocol, WithExportConfig};
use opentelemetry_sdk::trace::{Sampler, SdkTracerProvider};
use opentelemetry_sdk::Resource;
use tracing::Level;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::filter::Targets;
use tracing_subscriber::registry::LookupSpan;
use tracing_subscriber::Layer;

use super::trace_context::TraceParent;
use crate::config::TelemetryConfig;

/// How long one export may take before the batch is given up (the collector is unreachable).
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

/// Whether spans are exported: the OpenTelemetry fields of a request's span are recorded only
/// then, since every field recorded costs the log layer a re-serialization of the span's fields.
static EXPORTING: AtomicBool = AtomicBool::new(false);

/// Whether this process exports spans (`--otlp-endpoint`).
pub fn exporting() -> bool {
    EXPORTING.load(Ordering::Relaxed)
}

/// The name spans are exported under (`service.name`).
const SERVICE_NAME: &str = "herald";

/// Keeps the exporter running; dropping it exports the spans still queued (at most
/// [`EXPORT_TIMEOUT`]) and stops it, so spans of a node's last requests are not lost on a
/// graceful shutdown.
pub struct TracerGuard {
    provider: SdkTracerProvider,
}

impl Drop for TracerGuard {
    fn drop(&mut self) {
        if let Err(error) = self.provider.shutdown_with_timeout(EXPORT_TIMEOUT) {
            eprintln!("herald: exporting the last spans failed: {error}");
        }
    }
}

/// A layer of the process's subscriber, boxed so its type does not name the exporter's.
pub(super) type BoxedLayer<S> = Box<dyn Layer<S> + Send + Sync>;

/// The layer that exports Herald's spans to `config.otlp_endpoint`, with what keeps it
/// running; `None` when no endpoint is configured.
pub(super) fn export_layer<S>(
    config: &TelemetryConfig,
    node_id: u64,
) -> anyhow::Result<Option<(BoxedLayer<S>, TracerGuard)>>
where
    S: tracing::Subscriber + for<'span> LookupSpan<'span> + Send + Sync,
{
    let Some(url) = config.otlp_traces_url() else {
        return Ok(None);
    };
    // The exporter's reqwest client speaks TLS (an https:// collector) through rustls with no
    // provider of its own, and panics being built unless a process default is installed: the
    // `ring` one, Herald's only provider (an error says one is installed already).
    let _ = rustls::crypto::ring::default_provider().install_default();
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(url.clone())
        .with_timeout(EXPORT_TIMEOUT)
        .build()
        .with_context(|| format!("building the OTLP span exporter for {url}"))?;
    let resource = Resource::builder()
        .with_service_name(SERVICE_NAME)
        .with_attribute(KeyValue::new("service.instance.id", node_id.to_string()))
        .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
        .build();
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_sampler(Sampler::ParentBased(Box::new(Sampler::TraceIdRatioBased(
            config.otlp_sample_ratio,
        ))))
        .with_resource(resource)
        .build();
    let tracer = provider.tracer(SERVICE_NAME);
    // Herald's own spans and events at info only: dependencies' spans (hyper's, openraft's)
    // would multiply the export volume and say little an operator can act on.
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_threads(false)
        .with_filter(Targets::new().with_target("herald", Level::INFO));
    EXPORTING.store(true, Ordering::Relaxed);
    tracing::info!(%url, ratio = config.otlp_sample_ratio, "exporting spans over OTLP");
    Ok(Some((Box::new(layer), TracerGuard { provider })))
}

/// Makes `span` a child of the client's span named by its `traceparent`, so the exported span
/// joins the client's trace (and the trace's sampling decision). Does nothing when spans are
/// not exported.
pub fn set_remote_parent(span: &tracing::Span, parent: &TraceParent) {
    let context = SpanContext::new(
        TraceId::from_bytes(parent.trace_id),
        SpanId::from_bytes(parent.span_id),
        TraceFlags::new(parent.flags),
        true,
        TraceState::default(),
    );
    // An error only says no exporting layer is installed: then there is nothing to parent.
    let _ = span.set_parent(opentelemetry::Context::new().with_remote_span_context(context));
}

/// Renames an exported span after it started (a request's span is named by its route, known
/// only once routed): `otel.name` recorded late does not rename a span that already has
/// children. Does nothing when spans are not exported.
pub fn rename(span: &tracing::Span, name: String) {
    span.context().span().update_name(name);
}
